// Attention sub-block of a Gemma decoder layer (gemma-architectures.md §1.2 step 2, §2.2, §3.3.2).
#include <cstring>
#include <vector>

#include "kv/paged_attention.h"
#include "model/blocks.h"
#include "ops/ops.h"

namespace eg::blocks {

void attention(const Step& st, int layer, const LayerWeights& w, const float* inv_freq, KVCache& kv,
               const float* h, float* out) {
  const ModelConfig& cfg = st.cfg;
  const LayerConfig& lc = cfg.layers[layer];
  ForwardScratch& s = st.s;
  const int T = st.T;
  const int64_t nh = cfg.n_heads, nkv = lc.n_kv_heads, hd = lc.head_dim;
  const float eps = cfg.rms_norm_eps, off = cfg.norm_offset;
  grow(s.q, static_cast<size_t>(T) * nh * hd);
  grow(s.attn, static_cast<size_t>(T) * nh * hd);

  ops::matmul(h, T, w.q, s.q.data());
  if (cfg.qk_norm) norm_rows(s.q.data(), T * nh, w.q_norm, off, eps, s.q.data());
  ops::rope(s.q.data(), T, nh, hd, lc.rope_dims, st.pos, inv_freq);

  if (lc.kv_source < 0) {  // this layer computes and stores its own K/V
    const size_t kv_row = static_cast<size_t>(nkv * hd);
    grow(s.k, T * kv_row);
    grow(s.v, T * kv_row);
    ops::matmul(h, T, w.k, s.k.data());
    if (lc.k_eq_v) std::memcpy(s.v.data(), s.k.data(), T * kv_row * sizeof(float));  // raw K as V
    else ops::matmul(h, T, w.v, s.v.data());
    if (cfg.qk_norm) norm_rows(s.k.data(), T * nkv, w.k_norm, off, eps, s.k.data());
    ops::rope(s.k.data(), T, nkv, hd, lc.rope_dims, st.pos, inv_freq);
    if (cfg.v_norm) ops::rmsnorm(s.v.data(), T * nkv, hd, nullptr, DType::F32, 0.0f, eps, s.v.data());
    kv.write(layer, st.pos[0], T, s.k.data(), s.v.data());  // converted to the cache's KV type
  }

  ops::AttentionParams ap;
  ap.n_heads = nh;
  ap.n_kv_heads = nkv;
  ap.head_dim = hd;
  ap.scale = cfg.query_scale;
  ap.softcap = cfg.attn_softcap;
  ap.window = lc.type == LayerType::Sliding ? cfg.sliding_window : 0;
  // kv.view(layer) reads the source layer's pages for a KV-shared layer.
  kv::paged_attention(s.q.data(), T, st.pos, kv.view(layer), ap, s.attn.data());
  ops::matmul(s.attn.data(), T, w.o, out);
}

}  // namespace eg::blocks
