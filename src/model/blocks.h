// The sub-blocks of one decoder layer, shared by every Gemma generation and driven by
// ModelConfig (gemma-architectures.md §1.2, §2.2, §3.3). Internal to src/model.
#pragma once
#include <cstdint>
#include <vector>

#include "kv/kv_cache.h"
#include "model/config.h"
#include "model/model.h"
#include "model/weights.h"
#include "ops/ops.h"

namespace eg::blocks {

/// Grows a scratch buffer to at least n floats (never shrinks: no allocation once warm).
inline void grow(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

/// RMSNorm of `rows` rows with a stored weight (offset 1 for Gemma 2/3's 1+w, 0 for Gemma 4).
inline void norm_rows(const float* x, int64_t rows, const NormWeight& w, float offset, float eps, float* y) {
  ops::rmsnorm(x, rows, w.n, w.data, w.dtype, offset, eps, y);
}

/// What every block of one forward call needs: T tokens at positions pos[0..T).
struct Step {
  const ModelConfig& cfg;
  int T;
  const int32_t* pos;
  ForwardScratch& s;
  /// Per row, the last key position it may see (>= pos; a bidirectional image block reaches
  /// forward); nullptr: causal (pos itself). attention() then writes K/V page by page, so the T
  /// rows may span several KV pages prepared by begin_append.
  const int32_t* key_end = nullptr;
};

/// Attention sub-block: reads the normed input h [T, H], writes o_proj output out [T, H].
/// st.pos must be consecutive positions inside one KV page, prepared by kv.begin_append.
/// Projects q (q_norm, RoPE), and unless the layer is KV-shared, k/v (k_norm + RoPE on k, v_norm
/// on v, V from the raw K projection for K=V layers) into the cache at pos; then causal or
/// sliding-window GQA attention against the layer's (or its source layer's) cache.
void attention(const Step& st, int layer, const LayerWeights& w, const float* inv_freq, KVCache& kv,
               const float* h, float* out);

/// The same sub-block for st.T rows of independent sequences (Model::forward_batch): row b is one
/// token at position st.pos[b] of cache kvs[b] (prepared by kvs[b]->begin_append(st.pos[b], 1)).
/// The projections run once over all rows; the K/V write and attention run per row against its own
/// cache. Row b's output equals attention() of that token alone (every op is row-independent).
void attention_rows(const Step& st, int layer, const LayerWeights& w, const float* inv_freq,
                    KVCache* const* kvs, const float* h, float* out);

/// Feed-forward sub-block with its norms and residual: x [T, H] in/out.
/// Dense GeGLU MLP; with MoE (Gemma 4 26B-A4B) the router/experts branch is added (§3.3.5).
void feed_forward(const Step& st, const LayerConfig& lc, const LayerWeights& w, float* x);

/// Gemma 4 per-layer-embedding inputs (§3.3.1): ple [T, L·P] from the token ids and the scaled
/// input embeddings x0 [T, H].
void ple_inputs(const Step& st, const ModelWeights& w, const int32_t* tokens, const float* x0, float* ple);

/// Gemma 4 per-layer-embedding block of layer `layer` (§3.3.2 step 7): x [T, H] in/out.
void ple_block(const Step& st, int layer, const LayerWeights& w, const float* ple, float* x);

}  // namespace eg::blocks
