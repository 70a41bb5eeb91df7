#include "audio/gemma4_audio.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "core/file_util.h"
#include "ops/vision_ops.h"

namespace eg::audio {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

const TensorInfo& need(const TensorStore& st, const std::string& name, const std::vector<int64_t>& shape) {
  const TensorInfo* t = st.find(name);
  if (!t) throw Error("audio tower: checkpoint is missing tensor '" + name + "'");
  if (t->shape != shape) {
    std::string want = "[";
    for (size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + std::to_string(shape[i]);
    throw Error(name + ": shape " + t->shape_str() + ", expected " + want + "] from config.json");
  }
  return *t;
}

float scalar_or(const TensorStore& st, const std::string& name, float def, size_t& bytes) {
  const TensorInfo* t = st.find(name);
  if (!t) return def;
  if (t->numel() != 1) throw Error(name + ": shape " + t->shape_str() + ", expected a scalar");
  float v = 0;
  cpu::to_f32(t->data, t->dtype, 1, &v);
  bytes += t->nbytes;
  return v;
}

void clamp(float* x, size_t n, float lo, float hi) {
  if (!(lo > -kInf || hi < kInf)) return;
  for (size_t i = 0; i < n; ++i) x[i] = std::min(std::max(x[i], lo), hi);
}

void linear(const Gemma4AudioTower::Clipped& L, const float* x, int64_t T, float* y, std::vector<float>& tmp) {
  const float* in = x;
  if (L.in_min > -kInf || L.in_max < kInf) {
    tmp.assign(x, x + T * L.w.cols);
    clamp(tmp.data(), tmp.size(), L.in_min, L.in_max);
    in = tmp.data();
  }
  ops::matmul(in, T, L.w, y);
  clamp(y, static_cast<size_t>(T * L.w.rows), L.out_min, L.out_max);
}

float silu(float v) { return v / (1.0f + std::exp(-v)); }
float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

// Conv2d 3×3, stride 2, padding 1, no bias, over in [(t, f), Cin] (channel fastest) of Tin × Fin
// → out [(t, f), Cout] of ⌈Tin/2⌉ × ⌈Fin/2⌉, through im2col rows ordered (cin, ky, kx).
void conv3x3s2(const float* in, int Tin, int Fin, int Cin, const ops::Weight& W, std::vector<float>& out, int& To,
               int& Fo) {
  To = (Tin + 1) / 2;
  Fo = (Fin + 1) / 2;
  const int K = Cin * 9;
  std::vector<float> cols(static_cast<size_t>(To) * Fo * K, 0.0f);
  for (int t = 0; t < To; ++t)
    for (int f = 0; f < Fo; ++f) {
      float* row = cols.data() + (static_cast<size_t>(t) * Fo + f) * K;
      for (int ky = 0; ky < 3; ++ky) {
        const int ti = 2 * t - 1 + ky;
        if (ti < 0 || ti >= Tin) continue;
        for (int kx = 0; kx < 3; ++kx) {
          const int fi = 2 * f - 1 + kx;
          if (fi < 0 || fi >= Fin) continue;
          const float* src = in + (static_cast<size_t>(ti) * Fin + fi) * Cin;
          for (int c = 0; c < Cin; ++c) row[c * 9 + ky * 3 + kx] = src[c];
        }
      }
    }
  out.resize(static_cast<size_t>(To) * Fo * W.rows);
  ops::matmul(cols.data(), static_cast<int64_t>(To) * Fo, W, out.data());
}

}  // namespace

AudioConfig load_audio_config(const std::string& dir) {
  AudioConfig c;
  const std::string path = dir + "/config.json";
  const auto j = nlohmann::json::parse(read_file(path), nullptr, false);
  if (!j.is_object()) throw Error(path + ": not valid JSON");
  if (!j.contains("audio_config") || !j["audio_config"].is_object()) return c;
  const auto& a = j["audio_config"];
  c.present = true;
  auto get = [&](const nlohmann::json& o, const char* k, auto& dst) {
    if (o.contains(k) && o[k].is_number()) dst = o[k].get<std::decay_t<decltype(dst)>>();
  };
  get(a, "hidden_size", c.hidden);
  get(a, "num_hidden_layers", c.layers);
  get(a, "num_attention_heads", c.heads);
  get(a, "conv_kernel_size", c.conv_kernel);
  get(a, "attention_chunk_size", c.chunk);
  get(a, "attention_context_left", c.context_left);
  get(a, "attention_context_right", c.context_right);
  get(a, "attention_logit_cap", c.logit_cap);
  get(a, "attention_invalid_logits_value", c.invalid_logit);
  get(a, "residual_weight", c.residual_weight);
  get(a, "rms_norm_eps", c.eps);
  get(a, "output_proj_dims", c.output_dims);
  double gc = c.gradient_clipping;
  get(a, "gradient_clipping", gc);
  c.gradient_clipping = static_cast<float>(std::min<double>(gc, std::numeric_limits<float>::max()));
  if (a.contains("use_clipped_linears") && a["use_clipped_linears"].is_boolean())
    c.clipped_linears = a["use_clipped_linears"].get<bool>();
  if (a.contains("subsampling_conv_channels") && a["subsampling_conv_channels"].is_array())
    c.conv_channels = a["subsampling_conv_channels"].get<std::vector<int>>();
  if (a.contains("hidden_act") && a["hidden_act"].is_string() && a["hidden_act"] != "silu" && a["hidden_act"] != "swish")
    throw Error(path + ": audio_config.hidden_act '" + a["hidden_act"].get<std::string>() + "' is not supported (silu)");
  if (c.context_right != 0) throw Error(path + ": audio_config.attention_context_right != 0 is not supported");
  if (c.conv_channels.size() != 2) throw Error(path + ": audio_config.subsampling_conv_channels must have 2 entries");
  if (c.hidden < 2 || c.heads < 1 || c.hidden % c.heads != 0 || c.layers < 1 || c.conv_kernel < 1 ||
      c.context_left < 2 || c.chunk < 1 || c.output_dims < 1 || c.conv_channels[0] < 1 || c.conv_channels[1] < 1)
    throw Error(path + ": inconsistent audio_config sizes");
  const auto& t = j.contains("text_config") && j["text_config"].is_object() ? j["text_config"] : j;
  get(t, "hidden_size", c.text_hidden);
  get(j, "audio_token_id", c.audio_token_id);
  get(j, "boa_token_id", c.boa_id);
  get(j, "eoa_token_id", c.eoa_id);
  if (c.eoa_id < 0) get(j, "eoa_token_index", c.eoa_id);
  return c;
}

Gemma4AudioTower::Gemma4AudioTower(const AudioConfig& cfg, const TensorStore& st) : cfg_(cfg) {
  auto prefix = [&](std::initializer_list<const char*> cands, const std::string& probe, const char* what) {
    for (const char* p : cands)
      if (st.find(p + probe)) return std::string(p);
    throw Error(std::string("this model has no audio tower (no ") + what + " tensors such as '" + *cands.begin() +
                probe + "')");
  };
  if (!cfg.present) throw Error("this model has no audio tower (config.json has no audio_config)");
  const std::string A = prefix({"model.audio_tower.", "audio_tower."}, "output_proj.weight", "audio_tower");
  const std::string E = prefix({"model.embed_audio.", "embed_audio."}, "embedding_projection.weight", "embed_audio");
  const int64_t Ha = cfg.hidden, C0 = cfg.conv_channels[0], C1 = cfg.conv_channels[1], nh = cfg.heads;
  const int64_t D = Ha / nh;
  auto mat = [&](const std::string& n, int64_t r, int64_t c) {
    const TensorInfo& t = need(st, n, {r, c});
    bytes_ += t.nbytes;
    return ops::Weight{t.data, t.dtype, r, c};
  };
  auto vec = [&](const std::string& n, int64_t len) {
    const TensorInfo& t = need(st, n, {len});
    bytes_ += t.nbytes;
    return Vec{t.data, t.dtype};
  };
  auto f32 = [&](const std::string& n, const std::vector<int64_t>& shape) {
    const TensorInfo& t = need(st, n, shape);
    bytes_ += t.nbytes;
    std::vector<float> v(static_cast<size_t>(t.numel()));
    cpu::to_f32(t.data, t.dtype, v.size(), v.data());
    return v;
  };
  auto clipped = [&](const std::string& n, int64_t out, int64_t in) {
    Clipped c{mat(n + ".linear.weight", out, in), -kInf, kInf, -kInf, kInf};
    if (cfg.clipped_linears) {
      c.in_min = scalar_or(st, n + ".input_min", -kInf, bytes_);
      c.in_max = scalar_or(st, n + ".input_max", kInf, bytes_);
      c.out_min = scalar_or(st, n + ".output_min", -kInf, bytes_);
      c.out_max = scalar_or(st, n + ".output_max", kInf, bytes_);
      if (!(c.in_min <= c.in_max) || !(c.out_min <= c.out_max)) throw Error(n + ": clip bounds min > max (or NaN)");
    }
    return c;
  };
  const std::string S = A + "subsample_conv_projection.";
  {
    const TensorInfo& t = need(st, S + "layer0.conv.weight", {C0, 1, 3, 3});
    conv_[0] = ops::Weight{t.data, t.dtype, C0, 9};
    bytes_ += t.nbytes;
    const TensorInfo& u = need(st, S + "layer1.conv.weight", {C1, C0, 3, 3});
    conv_[1] = ops::Weight{u.data, u.dtype, C1, C0 * 9};
    bytes_ += u.nbytes;
  }
  conv_norm_[0] = vec(S + "layer0.norm.weight", C0);
  conv_norm_[1] = vec(S + "layer1.norm.weight", C1);
  const TensorInfo* ip = st.find(S + "input_proj_linear.weight");
  if (!ip || ip->shape.size() != 2 || ip->shape[1] % C1 != 0)
    throw Error("audio tower: " + S + "input_proj_linear.weight is missing or not [" + std::to_string(Ha) +
                ", k·" + std::to_string(C1) + "]");
  mel_in_ = static_cast<int>(ip->shape[1] / C1 * 4);
  in_proj_ = mat(S + "input_proj_linear.weight", Ha, C1 * (mel_in_ / 4));
  const TensorInfo* f1 = st.find(A + "layers.0.feed_forward1.ffw_layer_1.linear.weight");
  if (!f1 || f1->shape.size() != 2) throw Error("audio tower: checkpoint is missing tensor '" + A + "layers.0.feed_forward1.ffw_layer_1.linear.weight'");
  ffn_ = static_cast<int>(f1->shape[0]);
  layers_.resize(cfg.layers);
  const double ln2 = std::log(2.0);
  for (int i = 0; i < cfg.layers; ++i) {
    const std::string L = A + "layers." + std::to_string(i) + ".";
    Layer& l = layers_[i];
    for (auto [f, n] : {std::pair{&l.ff1, "feed_forward1."}, std::pair{&l.ff2, "feed_forward2."}}) {
      f->pre = vec(L + n + "pre_layer_norm.weight", Ha);
      f->post = vec(L + n + "post_layer_norm.weight", Ha);
      f->w1 = clipped(L + n + "ffw_layer_1", ffn_, Ha);
      f->w2 = clipped(L + n + "ffw_layer_2", Ha, ffn_);
    }
    l.pre_attn = vec(L + "norm_pre_attn.weight", Ha);
    l.post_attn = vec(L + "norm_post_attn.weight", Ha);
    l.out_norm = vec(L + "norm_out.weight", Ha);
    l.q = clipped(L + "self_attn.q_proj", Ha, Ha);
    l.k = clipped(L + "self_attn.k_proj", Ha, Ha);
    l.v = clipped(L + "self_attn.v_proj", Ha, Ha);
    l.post = clipped(L + "self_attn.post", Ha, Ha);
    l.rel_k = mat(L + "self_attn.relative_k_proj.weight", Ha, Ha);
    const std::vector<float> pds = f32(L + "self_attn.per_dim_scale", {D});
    const float qs = static_cast<float>(std::pow(static_cast<double>(D), -0.5) / ln2);
    l.q_scale.resize(D);
    for (int64_t d = 0; d < D; ++d) l.q_scale[d] = qs * std::log1p(std::exp(pds[d]));  // softplus
    l.lc_pre = vec(L + "lconv1d.pre_layer_norm.weight", Ha);
    l.lc_norm = vec(L + "lconv1d.conv_norm.weight", Ha);
    l.lc_start = clipped(L + "lconv1d.linear_start", 2 * Ha, Ha);
    l.lc_end = clipped(L + "lconv1d.linear_end", Ha, Ha);
    l.dw = f32(L + "lconv1d.depthwise_conv1d.weight", {Ha, 1, cfg.conv_kernel});
  }
  // Sinusoidal relative positions: row r = distance r, [sin(r·τ) | cos(r·τ)], τ_i = e^(−i·ln 1e4/(n−1)).
  const int64_t nts = Ha / 2;
  rel_table_.assign(static_cast<size_t>(cfg.context_left) * Ha, 0.0f);
  const double inc = std::log(10000.0) / std::max<int64_t>(nts - 1, 1);
  for (int r = 0; r < cfg.context_left; ++r)
    for (int64_t i = 0; i < nts; ++i) {
      const float ang = static_cast<float>(r) * static_cast<float>(std::exp(-static_cast<double>(i) * inc));
      rel_table_[r * Ha + i] = std::sin(ang);
      rel_table_[r * Ha + nts + i] = std::cos(ang);
    }
  out_w_ = mat(A + "output_proj.weight", cfg.output_dims, Ha);
  out_b_ = vec(A + "output_proj.bias", cfg.output_dims);
  if (cfg.text_hidden <= 0) throw Error("audio tower: config.json gives no text hidden_size");
  emb_ = mat(E + "embedding_projection.weight", cfg.text_hidden, cfg.output_dims);
}

void Gemma4AudioTower::ffn(const Ffn& f, float* x, int T, std::vector<float>& h, std::vector<float>& u,
                           std::vector<float>& tmp) const {
  const int64_t Ha = cfg_.hidden;
  const size_t n = static_cast<size_t>(T) * Ha;
  h.assign(x, x + n);
  clamp(h.data(), n, -cfg_.gradient_clipping, cfg_.gradient_clipping);
  ops::rmsnorm(h.data(), T, Ha, f.pre.data, f.pre.dtype, 0.0f, cfg_.eps, h.data());
  u.resize(static_cast<size_t>(T) * ffn_);
  linear(f.w1, h.data(), T, u.data(), tmp);
  for (float& v : u) v = silu(v);
  linear(f.w2, u.data(), T, h.data(), tmp);
  clamp(h.data(), n, -cfg_.gradient_clipping, cfg_.gradient_clipping);
  ops::rmsnorm(h.data(), T, Ha, f.post.data, f.post.dtype, 0.0f, cfg_.eps, h.data());
  for (size_t i = 0; i < n; ++i) x[i] += cfg_.residual_weight * h[i];
}

void Gemma4AudioTower::attention(const Layer& l, const float* h, int T, float* out, std::vector<float>& tmp) const {
  const int64_t Ha = cfg_.hidden, nh = cfg_.heads, D = Ha / nh;
  const int P = cfg_.context_left - 1;  // keys δ = t − s ∈ [0, P)
  const size_t n = static_cast<size_t>(T) * Ha;
  std::vector<float> q(n), k(n), v(n), att(n), rk(static_cast<size_t>(cfg_.context_left) * Ha);
  linear(l.q, h, T, q.data(), tmp);
  linear(l.k, h, T, k.data(), tmp);
  linear(l.v, h, T, v.data(), tmp);
  ops::matmul(rel_table_.data(), cfg_.context_left, l.rel_k, rk.data());
  const float ks = static_cast<float>(std::log1p(std::exp(1.0)) / std::log(2.0));
  for (int t = 0; t < T; ++t)
    for (int64_t c = 0; c < Ha; ++c) {
      q[t * Ha + c] *= l.q_scale[c % D];
      k[t * Ha + c] *= ks;
    }
  std::vector<float> sc(static_cast<size_t>(P));
  for (int t = 0; t < T; ++t)
    for (int64_t hd = 0; hd < nh; ++hd) {
      const float* qt = q.data() + t * Ha + hd * D;
      const int s0 = std::max(0, t - P + 1);
      float mx = -kInf;
      for (int s = s0; s <= t; ++s) {
        const float* ks_ = k.data() + static_cast<size_t>(s) * Ha + hd * D;
        const float* rr = rk.data() + static_cast<size_t>(t - s) * Ha + hd * D;
        float a = 0, b = 0;
        for (int64_t d = 0; d < D; ++d) {
          a += qt[d] * ks_[d];
          b += qt[d] * rr[d];
        }
        float z = a + b;
        z = cfg_.logit_cap * std::tanh(z / cfg_.logit_cap);
        sc[t - s] = z;
        mx = std::max(mx, z);
      }
      double sum = 0;
      for (int s = s0; s <= t; ++s) {
        sc[t - s] = std::exp(sc[t - s] - mx);
        sum += sc[t - s];
      }
      float* o = att.data() + t * Ha + hd * D;
      std::fill(o, o + D, 0.0f);
      for (int s = s0; s <= t; ++s) {
        const float p = static_cast<float>(sc[t - s] / sum);
        const float* vs = v.data() + static_cast<size_t>(s) * Ha + hd * D;
        for (int64_t d = 0; d < D; ++d) o[d] += p * vs[d];
      }
    }
  linear(l.post, att.data(), T, out, tmp);
}

void Gemma4AudioTower::encode(const float* feat, int n, int mel, std::vector<float>& soft,
                              std::vector<float>* tower_hidden) const {
  if (n < 1) throw Error("audio tower: a clip needs at least one feature frame (10 ms)");
  if (mel != mel_in_)
    throw Error("audio tower: " + std::to_string(mel) + " mel bins, the tower expects " + std::to_string(mel_in_));
  const int64_t Ha = cfg_.hidden, C0 = cfg_.conv_channels[0], C1 = cfg_.conv_channels[1];
  const float eps = cfg_.eps;
  // Subsampling: two stride-2 convs, LayerNorm over channels (weight only), ReLU.
  std::vector<float> a, b;
  int T1 = 0, F1 = 0, T = 0, F2 = 0;
  conv3x3s2(feat, n, mel, 1, conv_[0], a, T1, F1);
  ops::layernorm(a.data(), static_cast<int64_t>(T1) * F1, C0, conv_norm_[0].data, conv_norm_[0].dtype, nullptr,
                 DType::F32, eps, a.data());
  for (float& v : a) v = std::max(v, 0.0f);
  conv3x3s2(a.data(), T1, F1, static_cast<int>(C0), conv_[1], b, T, F2);
  ops::layernorm(b.data(), static_cast<int64_t>(T) * F2, C1, conv_norm_[1].data, conv_norm_[1].dtype, nullptr,
                 DType::F32, eps, b.data());
  for (float& v : b) v = std::max(v, 0.0f);
  // b is [t, (f, c)]: the (mel, channel) flatten, channel fastest.
  const size_t N = static_cast<size_t>(T) * Ha;
  std::vector<float> x(N), h(N), u, tmp, o(N);
  ops::matmul(b.data(), T, in_proj_, x.data());
  const float g = cfg_.gradient_clipping;
  for (const Layer& l : layers_) {
    ffn(l.ff1, x.data(), T, h, u, tmp);
    h.assign(x.begin(), x.end());
    clamp(h.data(), N, -g, g);
    ops::rmsnorm(h.data(), T, Ha, l.pre_attn.data, l.pre_attn.dtype, 0.0f, eps, h.data());
    attention(l, h.data(), T, o.data(), tmp);
    clamp(o.data(), N, -g, g);
    ops::rmsnorm(o.data(), T, Ha, l.post_attn.data, l.post_attn.dtype, 0.0f, eps, o.data());
    ops::add_inplace(x.data(), o.data(), static_cast<int64_t>(N));
    // Light conv: GLU, causal depthwise conv, norm, silu, linear_end.
    ops::rmsnorm(x.data(), T, Ha, l.lc_pre.data, l.lc_pre.dtype, 0.0f, eps, h.data());
    u.resize(2 * N);
    linear(l.lc_start, h.data(), T, u.data(), tmp);
    for (int t = 0; t < T; ++t)
      for (int64_t c = 0; c < Ha; ++c) h[t * Ha + c] = u[t * 2 * Ha + c] * sigmoid(u[t * 2 * Ha + Ha + c]);
    const int K = cfg_.conv_kernel;
    for (int t = 0; t < T; ++t)
      for (int64_t c = 0; c < Ha; ++c) {
        float acc = 0;
        for (int j = 0; j < K; ++j) {
          const int ti = t - (K - 1) + j;
          if (ti >= 0) acc += l.dw[c * K + j] * h[ti * Ha + c];
        }
        o[t * Ha + c] = acc;
      }
    clamp(o.data(), N, -g, g);
    ops::rmsnorm(o.data(), T, Ha, l.lc_norm.data, l.lc_norm.dtype, 0.0f, eps, o.data());
    for (float& v : o) v = silu(v);
    linear(l.lc_end, o.data(), T, h.data(), tmp);
    ops::add_inplace(x.data(), h.data(), static_cast<int64_t>(N));
    ffn(l.ff2, x.data(), T, h, u, tmp);
    clamp(x.data(), N, -g, g);
    ops::rmsnorm(x.data(), T, Ha, l.out_norm.data, l.out_norm.dtype, 0.0f, eps, x.data());
  }
  const int64_t P = cfg_.output_dims;
  std::vector<float> y(static_cast<size_t>(T) * P);
  ops::matmul(x.data(), T, out_w_, y.data());
  ops::add_bias(y.data(), T, P, out_b_.data, out_b_.dtype);
  if (tower_hidden) *tower_hidden = y;
  ops::rmsnorm(y.data(), T, P, nullptr, DType::F32, 0.0f, eps, y.data());
  soft.resize(static_cast<size_t>(T) * cfg_.text_hidden);
  ops::matmul(y.data(), T, emb_, soft.data());
}

}  // namespace eg::audio
