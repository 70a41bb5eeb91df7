// Grouped-query attention of new queries against a paged KV cache layer (kv_cache.h).
//
// Same contract and arithmetic as ops::attention (ops/ops.h): causal, optional sliding window,
// GQA (query head h reads kv head h / (n_heads / n_kv_heads)), scores = (q·k)·scale, optional
// soft-capping, softmax in f32, out = Σ p·v. Keys and values are converted from the page's
// storage type to f32 on the fly (F16/BF16 exactly; INT8 as q·scale). With F32 storage the result
// is bit-identical to ops::attention on the same K/V laid out contiguously, whatever the page size.
// Deterministic: an output row depends neither on T, on the batching of queries, nor on the number
// of threads (one thread-pool dispatch; a task takes the query heads of one kv head for a tile of
// positions and converts each K/V row once for all of them, but each (query, head) pair is still
// computed serially in key order with the same operations).
#pragma once
#include <cstdint>

#include "kv/kv_cache.h"
#include "ops/ops.h"

namespace eg::kv {

/// q: [T, n_heads, head_dim] f32 at absolute positions pos[0..T) (increasing, RoPE applied);
/// kv: the layer's pages, which must hold every position a query can see (0 .. pos[T-1], or the
/// window); out: [T, n_heads, head_dim] f32. p.n_kv_heads / p.head_dim must equal the view's.
/// Throws eg::Error if a needed page is missing (recycled) or the shapes disagree.
/// key_end (optional, [T]): query t sees keys up to key_end[t] >= pos[t] instead of pos[t] (a
/// bidirectional image block; the sliding window still bounds keys from below); those keys must
/// be in the cache already. With p.symmetric (bidirectional encoder layers, ops.h) key_end is
/// required and query t sees max(0, pos - window/2) .. min(key_end[t], pos + window/2).
void paged_attention(const float* q, int64_t T, const int32_t* pos, const KVLayerView& kv,
                     const ops::AttentionParams& p, float* out, const int32_t* key_end = nullptr);

/// B single queries, row b against its own cache layer views[b] (batched decode of B sequences):
/// q / out [B, n_heads, head_dim], pos[b] the position of row b. Row b equals
/// paged_attention(q + b·n_heads·head_dim, 1, pos + b, views[b], p, ...), bit for bit; all B·n_heads
/// pairs run in one dispatch. Validates every row before computing any; throws as paged_attention.
void paged_attention_rows(const float* q, int64_t B, const int32_t* pos, const KVLayerView* views,
                          const ops::AttentionParams& p, float* out);

}  // namespace eg::kv
