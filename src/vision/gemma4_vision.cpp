#include "vision/gemma4_vision.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "ops/vision_ops.h"
#include "vision/tensor_bind.h"

namespace eg::vision {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

float scalar_or(const TensorStore& st, const std::string& name, float def, size_t& bytes) {
  const TensorInfo* t = st.find(name);
  if (!t) return def;
  if (t->numel() != 1) throw Error(name + ": shape " + t->shape_str() + ", expected a scalar");
  float v = 0;
  cpu::to_f32(t->data, t->dtype, 1, &v);
  bytes += t->nbytes;
  return v;
}

bool clamps(float lo, float hi) { return lo > -kInf || hi < kInf; }

void clamp(float* x, int64_t n, float lo, float hi) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::min(std::max(x[i], lo), hi);
}

// y = clip(x; L) for x [T, L.w.cols]; `tmp` holds the clamped input when the input bounds bite.
void linear(const Gemma4VisionTower::Clipped& L, const float* x, int64_t T, float* y, std::vector<float>& tmp) {
  const float* in = x;
  if (clamps(L.in_min, L.in_max)) {
    tmp.assign(x, x + T * L.w.cols);
    clamp(tmp.data(), static_cast<int64_t>(tmp.size()), L.in_min, L.in_max);
    in = tmp.data();
  }
  ops::matmul(in, T, L.w, y);
  if (clamps(L.out_min, L.out_max)) clamp(y, T * L.w.rows, L.out_min, L.out_max);
}

}  // namespace

Gemma4VisionTower::Gemma4VisionTower(const VisionConfig& cfg, const TensorStore& st) : cfg_(cfg) {
  if (cfg.kind != TowerKind::Gemma4) throw Error("internal: Gemma4VisionTower needs a Gemma 4 vision config");
  const std::string V =
      find_tensor_prefix(st, {"model.vision_tower.", "vision_tower."}, "patch_embedder.input_proj.weight", "vision_tower");
  const std::string E = find_tensor_prefix(st, {"model.embed_vision.", "embed_vision."},
                                           "embedding_projection.weight", "embed_vision");
  const int64_t Hv = cfg.hidden, I = cfg.intermediate, ps = cfg.patch_size, H = cfg.text_hidden;
  const int64_t nh = cfg.heads, nkv = cfg.kv_heads, d = cfg.head_dim, PS = cfg.position_embedding_size;
  if (nkv != nh)
    throw Error("Gemma 4 vision tower: num_key_value_heads " + std::to_string(nkv) + " != num_attention_heads " +
                std::to_string(nh) + " is not supported");
  if (d % 4 != 0) throw Error("Gemma 4 vision tower: head_dim " + std::to_string(d) + " is not a multiple of 4 (2-D RoPE)");
  auto mat = [&](const std::string& n, int64_t r, int64_t c) {
    const TensorInfo& t = need_tensor(st, n, {r, c});
    bytes_ += t.nbytes;
    return ops::Weight{t.data, t.dtype, r, c};
  };
  auto vec = [&](const std::string& n, int64_t len) {
    const TensorInfo& t = need_tensor(st, n, {len});
    bytes_ += t.nbytes;
    return Vec{t.data, t.dtype};
  };
  auto clipped = [&](const std::string& n, int64_t out, int64_t in) {
    Clipped c{mat(n + ".linear.weight", out, in), -kInf, kInf, -kInf, kInf};
    if (cfg.clipped_linears) {
      c.in_min = scalar_or(st, n + ".input_min", -kInf, bytes_);
      c.in_max = scalar_or(st, n + ".input_max", kInf, bytes_);
      c.out_min = scalar_or(st, n + ".output_min", -kInf, bytes_);
      c.out_max = scalar_or(st, n + ".output_max", kInf, bytes_);
      if (!(c.in_min <= c.in_max) || !(c.out_min <= c.out_max))
        throw Error(n + ": clip bounds min > max (or NaN)");
    }
    return c;
  };
  patch_ = mat(V + "patch_embedder.input_proj.weight", Hv, 3 * ps * ps);
  {
    const TensorInfo& t = need_tensor(st, V + "patch_embedder.position_embedding_table", {2, PS, Hv});
    bytes_ += t.nbytes;
    std::vector<float> all(static_cast<size_t>(2 * PS * Hv));
    cpu::to_f32(t.data, t.dtype, all.size(), all.data());
    pos_x_.assign(all.begin(), all.begin() + PS * Hv);
    pos_y_.assign(all.begin() + PS * Hv, all.end());
  }
  layers_.resize(cfg.layers);
  for (int i = 0; i < cfg.layers; ++i) {
    const std::string L = V + "encoder.layers." + std::to_string(i) + ".";
    Layer& l = layers_[i];
    l.q = clipped(L + "self_attn.q_proj", nh * d, Hv);
    l.k = clipped(L + "self_attn.k_proj", nkv * d, Hv);
    l.v = clipped(L + "self_attn.v_proj", nkv * d, Hv);
    l.o = clipped(L + "self_attn.o_proj", Hv, nh * d);
    l.gate = clipped(L + "mlp.gate_proj", I, Hv);
    l.up = clipped(L + "mlp.up_proj", I, Hv);
    l.down = clipped(L + "mlp.down_proj", Hv, I);
    l.ln_in = vec(L + "input_layernorm.weight", Hv);
    l.q_norm = vec(L + "self_attn.q_norm.weight", d);
    l.k_norm = vec(L + "self_attn.k_norm.weight", d);
    l.ln_post_attn = vec(L + "post_attention_layernorm.weight", Hv);
    l.ln_pre_ff = vec(L + "pre_feedforward_layernorm.weight", Hv);
    l.ln_post_ff = vec(L + "post_feedforward_layernorm.weight", Hv);
  }
  if (cfg.standardize) {
    for (auto [name, dst] : {std::pair{"std_bias", &std_bias_}, std::pair{"std_scale", &std_scale_}}) {
      const TensorInfo& t = need_tensor(st, V + name, {Hv});
      bytes_ += t.nbytes;
      dst->resize(static_cast<size_t>(Hv));
      cpu::to_f32(t.data, t.dtype, dst->size(), dst->data());
    }
  }
  proj_ = mat(E + "embedding_projection.weight", H, Hv);
}

void Gemma4VisionTower::encode(const Gemma4Patches& p, std::vector<float>& soft, std::vector<float>* tower_hidden) const {
  const int64_t Hv = cfg_.hidden, I = cfg_.intermediate, ps = cfg_.patch_size, nh = cfg_.heads, d = cfg_.head_dim;
  const int64_t K = 3 * ps * ps, P = static_cast<int64_t>(p.grid_h) * p.grid_w, k = cfg_.pooling_kernel;
  const float eps = cfg_.eps;
  if (P <= 0 || static_cast<int64_t>(p.pixels.size()) != P * K || static_cast<int64_t>(p.positions.size()) != 2 * P)
    throw Error("Gemma 4 vision tower: the image's patches do not match its " + std::to_string(p.grid_h) + "x" +
                std::to_string(p.grid_w) + " grid of " + std::to_string(ps) + "-pixel patches");
  if (p.grid_h % k != 0 || p.grid_w % k != 0)
    throw Error("Gemma 4 vision tower: a " + std::to_string(p.grid_h) + "x" + std::to_string(p.grid_w) +
                " patch grid cannot be pooled " + std::to_string(k) + "x" + std::to_string(k));
  std::vector<int32_t> px(static_cast<size_t>(P)), py(static_cast<size_t>(P));
  for (int64_t n = 0; n < P; ++n) {
    px[n] = p.positions[2 * n];
    py[n] = p.positions[2 * n + 1];
    if (px[n] < 0 || py[n] < 0 || px[n] >= p.grid_w || py[n] >= p.grid_h)
      throw Error("Gemma 4 vision tower: patch position (" + std::to_string(px[n]) + ", " + std::to_string(py[n]) +
                  ") is outside the " + std::to_string(p.grid_h) + "x" + std::to_string(p.grid_w) + " grid");
    if (px[n] >= cfg_.position_embedding_size || py[n] >= cfg_.position_embedding_size)
      throw Error("Gemma 4 vision tower: patch position (" + std::to_string(px[n]) + ", " + std::to_string(py[n]) +
                  ") is outside the position table (" + std::to_string(cfg_.position_embedding_size) + ")");
  }

  // Patch embedding: 2·(p − 0.5), input_proj, + (x row + y row) of the position table.
  std::vector<float> X(p.pixels.size());
  for (size_t i = 0; i < X.size(); ++i) X[i] = 2.0f * (p.pixels[i] - 0.5f);
  const size_t PH = static_cast<size_t>(P * Hv), PD = static_cast<size_t>(P * nh * d);
  std::vector<float> x(PH), h(PH), o(PH), q(PD), kk(PD), v(PD), att(PD), g(static_cast<size_t>(P * I)),
      u(g.size()), tmp;
  ops::matmul(X.data(), P, patch_, x.data());
  for (int64_t n = 0; n < P; ++n) {
    const float* tx = pos_x_.data() + static_cast<size_t>(px[n]) * Hv;
    const float* ty = pos_y_.data() + static_cast<size_t>(py[n]) * Hv;
    float* xr = x.data() + n * Hv;
    for (int64_t i = 0; i < Hv; ++i) xr[i] += tx[i] + ty[i];
  }

  // 2-D RoPE: per axis d/2 channels, d/4 frequencies 1/θ^(2i/(d/2)).
  std::vector<float> inv(static_cast<size_t>(d / 4));
  ops::rope_inv_freq(cfg_.rope_theta, d / 2, 1.0f, inv.data());
  auto rope2d = [&](float* t) {
    ops::rope(t, P, nh, d, d / 2, px.data(), inv.data());          // channels [0, d/2): x
    ops::rope(t + d / 2, P, nh, d, d / 2, py.data(), inv.data());  // channels [d/2, d): y
  };

  for (const Layer& l : layers_) {
    ops::rmsnorm(x.data(), P, Hv, l.ln_in.data, l.ln_in.dtype, 0.0f, eps, h.data());
    linear(l.q, h.data(), P, q.data(), tmp);
    linear(l.k, h.data(), P, kk.data(), tmp);
    linear(l.v, h.data(), P, v.data(), tmp);
    ops::rmsnorm(q.data(), P * nh, d, l.q_norm.data, l.q_norm.dtype, 0.0f, eps, q.data());
    ops::rmsnorm(kk.data(), P * nh, d, l.k_norm.data, l.k_norm.dtype, 0.0f, eps, kk.data());
    ops::rmsnorm(v.data(), P * nh, d, nullptr, DType::F32, 0.0f, eps, v.data());
    rope2d(q.data());
    rope2d(kk.data());
    ops::attention_bidirectional(q.data(), kk.data(), v.data(), P, nh, d, 1.0f, att.data());
    linear(l.o, att.data(), P, o.data(), tmp);
    ops::rmsnorm(o.data(), P, Hv, l.ln_post_attn.data, l.ln_post_attn.dtype, 0.0f, eps, o.data());
    ops::add_inplace(x.data(), o.data(), P * Hv);
    ops::rmsnorm(x.data(), P, Hv, l.ln_pre_ff.data, l.ln_pre_ff.dtype, 0.0f, eps, h.data());
    linear(l.gate, h.data(), P, g.data(), tmp);
    linear(l.up, h.data(), P, u.data(), tmp);
    ops::gelu_tanh_mul(g.data(), u.data(), P * I, g.data());
    linear(l.down, g.data(), P, o.data(), tmp);
    ops::rmsnorm(o.data(), P, Hv, l.ln_post_ff.data, l.ln_post_ff.dtype, 0.0f, eps, o.data());
    ops::add_inplace(x.data(), o.data(), P * Hv);
  }

  // Pool k×k by position (row-major over the pooled grid), ·√Hv, optional standardization.
  const int64_t tw = p.grid_w / k, N = static_cast<int64_t>(p.grid_h / k) * tw;
  std::vector<float> Y(static_cast<size_t>(N * Hv), 0.0f);
  const float w = 1.0f / static_cast<float>(k * k);
  for (int64_t n = 0; n < P; ++n) {
    float* y = Y.data() + (px[n] / k + tw * (py[n] / k)) * Hv;
    const float* xr = x.data() + n * Hv;
    for (int64_t i = 0; i < Hv; ++i) y[i] += xr[i] * w;
  }
  const float root = static_cast<float>(std::sqrt(static_cast<double>(Hv)));
  for (float& y : Y) y *= root;
  if (cfg_.standardize)
    for (int64_t t = 0; t < N; ++t)
      for (int64_t i = 0; i < Hv; ++i) Y[t * Hv + i] = (Y[t * Hv + i] - std_bias_[i]) * std_scale_[i];
  if (tower_hidden) *tower_hidden = Y;

  // embed_vision: scale-less RMSNorm, then the projection to the text width.
  ops::rmsnorm(Y.data(), N, Hv, nullptr, DType::F32, 0.0f, eps, Y.data());
  soft.resize(static_cast<size_t>(N * cfg_.text_hidden));
  ops::matmul(Y.data(), N, proj_, soft.data());
}

}  // namespace eg::vision
