#include "kv/kv_cache.h"

#include "core/error.h"

namespace eg {

KVCache::KVCache(const ModelConfig& cfg, int capacity) : capacity_(capacity) {
  if (capacity <= 0) throw Error("KV cache capacity must be positive");
  k_.resize(cfg.n_layers);
  v_.resize(cfg.n_layers);
  for (int i = 0; i < cfg.n_layers; ++i) {
    const size_t n = static_cast<size_t>(capacity) * cfg.layers[i].n_kv_heads * cfg.layers[i].head_dim;
    k_[i].assign(n, 0.0f);
    v_[i].assign(n, 0.0f);
    bytes_ += 2 * n * sizeof(float);
  }
}

}  // namespace eg
