#include "model/model.h"

#include <cmath>
#include <cstring>

#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "ops/ops.h"

namespace eg {

std::unique_ptr<Model> Model::load_dir(const std::string& dir) {
  ModelConfig cfg = load_hf_config(dir);
  TensorStore store = TensorStore::open_dir(dir);
  return std::make_unique<Model>(std::move(cfg), std::move(store));
}

Model::Model(ModelConfig cfg, TensorStore store) : cfg_(std::move(cfg)) {
  w_ = bind_weights(std::move(store), cfg_);
  inv_freq_.resize(cfg_.n_layers);
  for (int i = 0; i < cfg_.n_layers; ++i) {
    const LayerConfig& l = cfg_.layers[i];
    inv_freq_[i].resize(l.rope_dims / 2);
    ops::rope_inv_freq(l.rope_theta, l.rope_dims, l.rope_linear_factor, inv_freq_[i].data());
  }
  // √H materialised as an f32 (the f32 reference path); Python computes H**0.5 in double.
  embed_scale_ = static_cast<float>(std::sqrt(static_cast<double>(cfg_.hidden_size)));
}

namespace {
void grow(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}
void norm_rows(const float* x, int64_t rows, const NormWeight& w, float offset, float eps, float* y) {
  ops::rmsnorm(x, rows, w.n, w.data, w.dtype, offset, eps, y);
}
}  // namespace

void Model::forward(const int32_t* tokens, int T, KVCache& kv, ForwardScratch& s, LogitsMode mode,
                    std::vector<float>& logits) const {
  if (T <= 0) throw Error("forward: no tokens");
  const int n_past = kv.n_past();
  if (n_past + T > kv.capacity())
    throw Error("context full: " + std::to_string(n_past + T) + " tokens do not fit the KV cache of " +
                std::to_string(kv.capacity()));
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
  for (int t = 0; t < T; ++t)
    if (tokens[t] < 0 || tokens[t] >= V)
      throw Error("token id " + std::to_string(tokens[t]) + " outside the vocabulary (size " +
                  std::to_string(V) + ")");

  std::vector<int32_t> pos(T);
  for (int t = 0; t < T; ++t) pos[t] = n_past + t;

  // Embedding lookup, scaled by √H.
  grow(s.x, static_cast<size_t>(T) * H);
  grow(s.h, static_cast<size_t>(T) * H);
  grow(s.proj, static_cast<size_t>(T) * H);
  const size_t row_bytes = static_cast<size_t>(H) * dtype_size(w_.embed.dtype);
  for (int t = 0; t < T; ++t) {
    float* xr = s.x.data() + static_cast<size_t>(t) * H;
    cpu::to_f32(static_cast<const uint8_t*>(w_.embed.data) + tokens[t] * row_bytes, w_.embed.dtype, H, xr);
    for (int64_t i = 0; i < H; ++i) xr[i] *= embed_scale_;
  }

  const float eps = cfg_.rms_norm_eps, off = cfg_.norm_offset;
  for (int li = 0; li < cfg_.n_layers; ++li) {
    const LayerConfig& lc = cfg_.layers[li];
    const LayerWeights& lw = w_.layers[li];
    const int64_t nh = cfg_.n_heads, nkv = lc.n_kv_heads, hd = lc.head_dim;
    const int64_t I = lc.intermediate_size;
    grow(s.q, static_cast<size_t>(T) * nh * hd);
    grow(s.k, static_cast<size_t>(T) * nkv * hd);
    grow(s.v, static_cast<size_t>(T) * nkv * hd);
    grow(s.attn, static_cast<size_t>(T) * nh * hd);
    grow(s.gate, static_cast<size_t>(T) * I);
    grow(s.up, static_cast<size_t>(T) * I);

    // Attention block.
    norm_rows(s.x.data(), T, lw.input_norm, off, eps, s.h.data());
    ops::matmul(s.h.data(), T, lw.q, s.q.data());
    ops::matmul(s.h.data(), T, lw.k, s.k.data());
    ops::matmul(s.h.data(), T, lw.v, s.v.data());
    if (cfg_.qk_norm) {
      norm_rows(s.q.data(), T * nh, lw.q_norm, off, eps, s.q.data());
      norm_rows(s.k.data(), T * nkv, lw.k_norm, off, eps, s.k.data());
    }
    ops::rope(s.q.data(), T, nh, hd, lc.rope_dims, pos.data(), inv_freq_[li].data());
    ops::rope(s.k.data(), T, nkv, hd, lc.rope_dims, pos.data(), inv_freq_[li].data());
    const size_t kv_row = static_cast<size_t>(nkv * hd);
    std::memcpy(kv.k(li) + n_past * kv_row, s.k.data(), T * kv_row * sizeof(float));
    std::memcpy(kv.v(li) + n_past * kv_row, s.v.data(), T * kv_row * sizeof(float));
    ops::AttentionParams ap;
    ap.n_heads = nh;
    ap.n_kv_heads = nkv;
    ap.head_dim = hd;
    ap.scale = cfg_.query_scale;
    ap.softcap = cfg_.attn_softcap;
    ap.window = lc.type == LayerType::Sliding ? cfg_.sliding_window : 0;
    ops::attention(s.q.data(), T, pos.data(), kv.k(li), kv.v(li), ap, s.attn.data());
    ops::matmul(s.attn.data(), T, lw.o, s.proj.data());
    norm_rows(s.proj.data(), T, lw.post_attn_norm, off, eps, s.proj.data());
    ops::add_inplace(s.x.data(), s.proj.data(), T * H);

    // MLP block (GeGLU).
    norm_rows(s.x.data(), T, lw.pre_ffw_norm, off, eps, s.h.data());
    ops::matmul(s.h.data(), T, lw.gate, s.gate.data());
    ops::matmul(s.h.data(), T, lw.up, s.up.data());
    ops::gelu_tanh_mul(s.gate.data(), s.up.data(), T * I, s.gate.data());
    ops::matmul(s.gate.data(), T, lw.down, s.proj.data());
    norm_rows(s.proj.data(), T, lw.post_ffw_norm, off, eps, s.proj.data());
    ops::add_inplace(s.x.data(), s.proj.data(), T * H);
  }
  kv.set_n_past(n_past + T);

  if (mode == LogitsMode::None) return;
  const int first = mode == LogitsMode::Last ? T - 1 : 0;
  const int rows = T - first;
  norm_rows(s.x.data() + static_cast<size_t>(first) * H, rows, w_.final_norm, off, eps, s.h.data());
  logits.resize(static_cast<size_t>(rows) * V);
  ops::matmul(s.h.data(), rows, w_.embed, logits.data());
  if (cfg_.final_softcap > 0.0f) ops::softcap(logits.data(), static_cast<int64_t>(rows) * V, cfg_.final_softcap);
}

}  // namespace eg
