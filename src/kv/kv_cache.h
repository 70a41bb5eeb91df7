// KV cache: the keys (after RoPE) and values of every processed position, per layer, in f32.
//
// Layout per layer: [capacity, n_kv_heads, head_dim], row p = absolute position p.
// This is the simple contiguous cache of the foundation issue: every layer keeps `capacity`
// positions. (The paged cache, with sliding-window layers holding only their window, replaces it
// in the sessions issue.) Gemma 4 KV-shared layers allocate nothing: k()/v() of such a layer
// return the storage of its source layer.
#pragma once
#include <cstddef>
#include <vector>

#include "model/config.h"

namespace eg {

class KVCache {
 public:
  /// Allocates capacity positions for every layer of `cfg`. capacity in tokens (> 0).
  KVCache(const ModelConfig& cfg, int capacity);

  float* k(int layer) { return k_[owner_[layer]].data(); }
  float* v(int layer) { return v_[owner_[layer]].data(); }
  const float* k(int layer) const { return k_[owner_[layer]].data(); }
  const float* v(int layer) const { return v_[owner_[layer]].data(); }

  int capacity() const { return capacity_; }
  /// Number of positions already stored (the next token's position).
  int n_past() const { return n_past_; }
  void set_n_past(int n) { n_past_ = n; }
  /// Rolls the cache back so that it holds positions 0 .. n-1 only (0 <= n <= n_past()).
  /// Returns how many positions are actually kept, which may be less than n when a layer no longer
  /// holds K/V that position n onwards needs (a sliding-window layer that recycled older pages);
  /// the caller must re-run the forward pass from the returned position. Never leaves stale K/V.
  int truncate(int n) {
    if (n < 0) n = 0;
    if (n < n_past_) n_past_ = n;
    return n_past_;
  }
  /// Empties the cache (n_past() = 0).
  void clear() { n_past_ = 0; }
  /// Bytes allocated for K and V over all layers (KV-shared layers add nothing).
  size_t bytes() const { return bytes_; }
  /// Bytes per token of one layer's K+V (0 for a KV-shared layer).
  size_t bytes_per_token(int layer) const { return per_token_[layer]; }

 private:
  int capacity_ = 0;
  int n_past_ = 0;
  size_t bytes_ = 0;
  std::vector<std::vector<float>> k_, v_;  // indexed by layer; empty for KV-shared layers
  std::vector<int> owner_;                  // layer whose storage a layer uses
  std::vector<size_t> per_token_;
};

}  // namespace eg
