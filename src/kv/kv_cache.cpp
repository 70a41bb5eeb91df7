#include "kv/kv_cache.h"

#include "core/error.h"

namespace eg {

KVCache::KVCache(const ModelConfig& cfg, int capacity) : capacity_(capacity) {
  if (capacity <= 0) throw Error("KV cache capacity must be positive");
  k_.resize(cfg.n_layers);
  v_.resize(cfg.n_layers);
  owner_.resize(cfg.n_layers);
  per_token_.assign(cfg.n_layers, 0);
  for (int i = 0; i < cfg.n_layers; ++i) {
    const LayerConfig& l = cfg.layers[i];
    owner_[i] = l.kv_source >= 0 ? l.kv_source : i;
    if (l.kv_source >= 0) continue;
    const size_t row = static_cast<size_t>(l.n_kv_heads) * l.head_dim;
    const size_t n = static_cast<size_t>(capacity) * row;
    k_[i].assign(n, 0.0f);
    v_[i].assign(n, 0.0f);
    per_token_[i] = 2 * row * sizeof(float);
    bytes_ += 2 * n * sizeof(float);
  }
}

}  // namespace eg
