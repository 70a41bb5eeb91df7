// Attention sub-block of a Gemma decoder layer (gemma-architectures.md §1.2 step 2, §2.2, §3.3.2).
#include <algorithm>
#include <cstring>
#include <vector>

#include "kv/paged_attention.h"
#include "model/blocks.h"
#include "ops/ops.h"

namespace eg::blocks {

namespace {

// Shared by attention() and attention_rows(): q [T, nh, hd] (q_norm, RoPE at st.pos) into s.q and,
// for a layer that owns its K/V, k/v [T, nkv, hd] (k_norm + RoPE, v_norm, K=V) into s.k / s.v.
// Every step is row-independent, so a row's values do not depend on the other rows.
void project_qkv(const Step& st, int layer, const LayerWeights& w, const float* inv_freq, const float* h) {
  const ModelConfig& cfg = st.cfg;
  const LayerConfig& lc = cfg.layers[layer];
  ForwardScratch& s = st.s;
  const int T = st.T;
  const int64_t nh = cfg.n_heads, nkv = lc.n_kv_heads, hd = lc.head_dim;
  const float eps = cfg.rms_norm_eps, off = cfg.norm_offset;
  grow(s.q, static_cast<size_t>(T) * nh * hd);
  grow(s.attn, static_cast<size_t>(T) * nh * hd);

  // q, k and v (those this layer computes) in one thread-pool dispatch.
  const bool own_kv = lc.kv_source < 0;  // this layer computes and stores its own K/V
  const size_t kv_row = static_cast<size_t>(nkv * hd);
  if (own_kv) {
    grow(s.k, T * kv_row);
    grow(s.v, T * kv_row);
    if (lc.k_eq_v) ops::matmul_fused(h, T, {{&w.q, s.q.data()}, {&w.k, s.k.data()}});
    else ops::matmul_fused(h, T, {{&w.q, s.q.data()}, {&w.k, s.k.data()}, {&w.v, s.v.data()}});
  } else {
    ops::matmul(h, T, w.q, s.q.data());
  }
  if (cfg.qk_norm) norm_rows(s.q.data(), T * nh, w.q_norm, off, eps, s.q.data());
  ops::rope(s.q.data(), T, nh, hd, lc.rope_dims, st.pos, inv_freq);

  if (own_kv) {
    if (lc.k_eq_v) std::memcpy(s.v.data(), s.k.data(), T * kv_row * sizeof(float));  // raw K as V
    if (cfg.qk_norm) norm_rows(s.k.data(), T * nkv, w.k_norm, off, eps, s.k.data());
    ops::rope(s.k.data(), T, nkv, hd, lc.rope_dims, st.pos, inv_freq);
    if (cfg.v_norm) ops::rmsnorm(s.v.data(), T * nkv, hd, nullptr, DType::F32, 0.0f, eps, s.v.data());
  }
}

ops::AttentionParams attention_params(const ModelConfig& cfg, const LayerConfig& lc) {
  ops::AttentionParams ap;
  ap.n_heads = cfg.n_heads;
  ap.n_kv_heads = lc.n_kv_heads;
  ap.head_dim = lc.head_dim;
  ap.scale = cfg.query_scale;
  ap.softcap = cfg.attn_softcap;
  ap.window = lc.type == LayerType::Sliding ? cfg.sliding_window : 0;
  ap.symmetric = cfg.bidirectional;
  return ap;
}

}  // namespace

void attention(const Step& st, int layer, const LayerWeights& w, const float* inv_freq, KVCache& kv,
               const float* h, float* out) {
  const LayerConfig& lc = st.cfg.layers[layer];
  ForwardScratch& s = st.s;
  project_qkv(st, layer, w, inv_freq, h);
  if (lc.kv_source < 0) {  // to the KV type, one page at a time
    const int P = kv.options().page_tokens;
    const size_t row = static_cast<size_t>(lc.n_kv_heads) * lc.head_dim;
    for (int t0 = 0; t0 < st.T;) {
      const int n = std::min(st.T - t0, P - st.pos[t0] % P);
      kv.write(layer, st.pos[t0], n, s.k.data() + t0 * row, s.v.data() + t0 * row);
      t0 += n;
    }
  }
  // kv.view(layer) reads the source layer's pages for a KV-shared layer. Gemma 4 "vision": image
  // blocks reach forward on sliding layers only (ModelConfig::image_blocks_sliding_only).
  const int32_t* key_end = st.cfg.image_blocks_sliding_only && lc.type != LayerType::Sliding ? nullptr : st.key_end;
  kv::paged_attention(s.q.data(), st.T, st.pos, kv.view(layer), attention_params(st.cfg, lc), s.attn.data(),
                      key_end);
  ops::matmul(s.attn.data(), st.T, w.o, out);
}

void attention_rows(const Step& st, int layer, const LayerWeights& w, const float* inv_freq,
                    KVCache* const* kvs, const float* h, float* out) {
  const ModelConfig& cfg = st.cfg;
  const LayerConfig& lc = cfg.layers[layer];
  ForwardScratch& s = st.s;
  const int64_t kvrow = static_cast<int64_t>(lc.n_kv_heads) * lc.head_dim;
  project_qkv(st, layer, w, inv_freq, h);
  if (lc.kv_source < 0)
    for (int b = 0; b < st.T; ++b) kvs[b]->write(layer, st.pos[b], 1, s.k.data() + b * kvrow, s.v.data() + b * kvrow);
  // Every row against its own cache, all (row, head) pairs in one dispatch.
  std::vector<KVLayerView> views(static_cast<size_t>(st.T));
  for (int b = 0; b < st.T; ++b) views[b] = kvs[b]->view(layer);
  kv::paged_attention_rows(s.q.data(), st.T, st.pos, views.data(), attention_params(cfg, lc), s.attn.data());
  ops::matmul(s.attn.data(), st.T, w.o, out);
}

}  // namespace eg::blocks
