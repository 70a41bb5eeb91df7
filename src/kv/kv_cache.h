// KV cache: the keys (after RoPE) and values of every processed position, per layer, in f32.
//
// Layout per layer: [capacity, n_kv_heads, head_dim], row p = absolute position p.
// This is the simple contiguous cache of the foundation issue: every layer keeps `capacity`
// positions. (The paged cache, with sliding-window layers holding only their window, replaces it
// in the sessions issue.)
#pragma once
#include <cstddef>
#include <vector>

#include "model/config.h"

namespace eg {

class KVCache {
 public:
  /// Allocates capacity positions for every layer of `cfg`. capacity in tokens (> 0).
  KVCache(const ModelConfig& cfg, int capacity);

  float* k(int layer) { return k_[layer].data(); }
  float* v(int layer) { return v_[layer].data(); }
  const float* k(int layer) const { return k_[layer].data(); }
  const float* v(int layer) const { return v_[layer].data(); }

  int capacity() const { return capacity_; }
  /// Number of positions already stored (the next token's position).
  int n_past() const { return n_past_; }
  void set_n_past(int n) { n_past_ = n; }
  /// Bytes allocated for K and V over all layers.
  size_t bytes() const { return bytes_; }

 private:
  int capacity_ = 0;
  int n_past_ = 0;
  size_t bytes_ = 0;
  std::vector<std::vector<float>> k_, v_;
};

}  // namespace eg
