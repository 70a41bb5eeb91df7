// Memory budget: what a session will need before anything is allocated, and paging the weights in.
//
// total = weights resident + KV cache for the context + scratch, where
//  - weights resident: the bytes of every mapped tensor the forward pass reads (the decoder's
//    tensors; tensors under ignored prefixes such as a vision tower are never touched, so they are
//    not counted). The tied LM head is the embedding: counted once.
//  - KV: kv_bytes_for_context(cfg, context, kv options) — exactly what the paged cache reserves
//    after filling the context (sliding-window layers are bounded by their window).
//  - scratch: the activation buffers of one forward pass of `chunk_tokens` tokens
//    (ForwardScratch: residual, norms, q/k/v, attention output, MLP gate/up, PLE, MoE) plus
//    attention scores over the whole context for every head and the logits row — an upper
//    estimate, not an allocation count.
// All sizes in bytes.
#pragma once
#include <cstddef>
#include <string>

#include "kv/kv_cache.h"
#include "model/model.h"

namespace eg {

struct MemoryEstimate {
  size_t weights_bytes = 0;
  size_t kv_bytes = 0;
  size_t scratch_bytes = 0;
  size_t total() const { return weights_bytes + kv_bytes + scratch_bytes; }
  /// "weights 123.4 MiB + KV 12.0 MiB (4096 tokens) + scratch 1.2 MiB = 136.6 MiB".
  std::string describe(int context_tokens) const;
};

/// Bytes of the mapped tensors the forward pass reads (see above).
size_t weights_resident_bytes(const Model& model);

/// Scratch bytes for one forward pass of `chunk_tokens` tokens with `context_tokens` visible.
size_t scratch_bytes(const ModelConfig& cfg, int chunk_tokens, int context_tokens);

/// The three parts for a session with `context_tokens` (> 0) and KV options `kv`.
MemoryEstimate estimate_memory(const Model& model, int context_tokens, const KVCacheOptions& kv,
                               int chunk_tokens);

/// The largest context (1 .. cfg.max_position_embeddings) whose estimate fits `budget_bytes`;
/// 0 when not even one token fits.
int max_context_for_budget(const Model& model, size_t budget_bytes, const KVCacheOptions& kv,
                           int chunk_tokens);

/// Throws eg::Error when estimate_memory(...) exceeds budget_bytes (> 0): "memory budget
/// 100.0 MiB is too small for a context of 4096 tokens: weights ... = ...; the largest context
/// that fits is N tokens" (or "not even a 1-token context fits (weights ... + scratch ...)").
/// budget_bytes 0: no check.
void check_memory_budget(const Model& model, size_t budget_bytes, int context_tokens,
                         const KVCacheOptions& kv, int chunk_tokens);

/// The media towers a session uses count too (their weights; the towers' activation buffers are
/// not estimated): throws eg::Error when estimate_memory(...) + tower_bytes exceeds budget_bytes
/// (> 0): "memory budget 100.0 MiB is too small for the vision tower: weights ... + KV ... +
/// scratch ... + towers 12.0 MiB = ...". `tower` names the tower being added. 0: no check.
void check_tower_budget(const Model& model, size_t budget_bytes, int context_tokens, const KVCacheOptions& kv,
                        int chunk_tokens, size_t tower_bytes, const std::string& tower);

/// Reads one byte per 4 KiB page of every tensor the forward pass reads, so later passes do not
/// page-fault on the mapping. Returns the bytes covered.
size_t touch_weights(const Model& model);

/// "1.5 GiB", "12.0 MiB", "512 B".
std::string format_bytes(size_t bytes);

}  // namespace eg
