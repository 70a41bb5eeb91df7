// Prefix cache across requests: a trie of page-aligned KV blocks with LRU eviction (prefix_cache.h).
#include "kv/prefix_cache.h"

#include <cstring>
#include <string>

#include "core/error.h"

namespace eg {

struct PrefixCache::Block {
  uint64_t id = 0, parent = 0, hash = 0, tick = 0;
  std::vector<int32_t> tokens;                    // the block's page_tokens ids
  std::vector<std::unique_ptr<uint8_t[]>> pages;  // per layer; null: not stored (KV-shared, recycled)
  std::vector<KVType> types;                      // per layer: the encoding of pages[l] (layer_type)
  size_t bytes = 0;
  int children = 0;
};

namespace {

// splitmix64 finalizer: a well-mixed 64-bit step.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t default_hash(uint64_t parent_id, const int32_t* tokens, int n) {
  uint64_t h = mix(parent_id);
  for (int i = 0; i < n; ++i) h = mix(h ^ static_cast<uint32_t>(tokens[i]));
  return h;
}

}  // namespace

PrefixCache::PrefixCache(const ModelConfig& cfg, const KVCacheOptions& kv_opt, size_t max_bytes, BlockHash hash)
    : cfg_(cfg), opt_(kv_opt), max_bytes_(max_bytes), hash_(hash ? hash : &default_hash) {
  if (opt_.max_tokens <= 0) opt_.max_tokens = 1;  // the capacity is per slot, not the store's
  page_bytes_.resize(cfg_.n_layers);
  for (int l = 0; l < cfg_.n_layers; ++l) page_bytes_[l] = kv_page_bytes(cfg_, l, opt_);  // validates opt_
}

PrefixCache::~PrefixCache() = default;

void PrefixCache::check_kv(const KVCache& kv, const char* what) const {
  const std::string w = std::string("prefix cache ") + what + ": ";
  if (kv.type() != opt_.type || kv.options().page_tokens != opt_.page_tokens)
    throw Error(w + "KV cache has type " + kv_type_name(kv.type()) + " and pages of " +
                std::to_string(kv.options().page_tokens) + " tokens, the prefix cache " + kv_type_name(opt_.type) +
                " and " + std::to_string(opt_.page_tokens));
  if (kv.n_layers() != cfg_.n_layers)
    throw Error(w + "KV cache has " + std::to_string(kv.n_layers()) + " layers, the model " +
                std::to_string(cfg_.n_layers));
  for (int l = 0; l < cfg_.n_layers; ++l)
    if (kv.page_bytes(l) != page_bytes_[l])
      throw Error(w + "KV cache layer " + std::to_string(l) + " does not match the model's KV shape");
}

PrefixCache::Block* PrefixCache::find_child(uint64_t parent, const int32_t* toks) const {
  const int P = opt_.page_tokens;
  auto [it, end] = index_.equal_range(hash_(parent, toks, P));
  for (; it != end; ++it) {
    Block* b = blocks_.at(it->second).get();
    if (b->parent == parent && std::memcmp(b->tokens.data(), toks, P * sizeof(int32_t)) == 0) return b;
  }
  return nullptr;
}

void PrefixCache::touch(Block& b) {
  if (b.children == 0) {
    leaves_.erase({b.tick, b.id});
    leaves_.insert({tick_, b.id});
  }
  b.tick = tick_;
}

void PrefixCache::remove_block(uint64_t id) {
  auto it = blocks_.find(id);
  Block& b = *it->second;
  leaves_.erase({b.tick, b.id});
  for (auto [i, end] = index_.equal_range(b.hash); i != end; ++i)
    if (i->second == id) {
      index_.erase(i);
      break;
    }
  bytes_ -= b.bytes;
  if (b.parent != 0) {
    Block& p = *blocks_.at(b.parent);
    if (--p.children == 0) leaves_.insert({p.tick, p.id});
  }
  blocks_.erase(it);
  ++stats_.evicted_blocks;
}

void PrefixCache::evict_to_limit() {
  // The least recently used leaf is the least recently used block (parents are never older).
  while (bytes_ > max_bytes_ && !leaves_.empty()) remove_block(leaves_.begin()->second);
}

void PrefixCache::insert(const std::vector<int32_t>& tokens, const KVCache& kv) {
  std::lock_guard<std::mutex> lock(mu_);
  check_kv(kv, "insert");
  if (tokens.size() < static_cast<size_t>(kv.n_past()))
    throw Error("prefix cache insert: " + std::to_string(tokens.size()) + " token ids for a KV cache of " +
                std::to_string(kv.n_past()) + " positions");
  if (max_bytes_ == 0) return;
  const int P = opt_.page_tokens, n_blocks = kv.n_past() / P;
  ++tick_;
  uint64_t parent = 0;
  for (int i = 0; i < n_blocks; ++i) {
    const int32_t* toks = tokens.data() + static_cast<size_t>(i) * P;
    Block* b = find_child(parent, toks);
    if (!b) {
      auto nb = std::make_unique<Block>();
      nb->id = next_id_++;
      nb->parent = parent;
      nb->hash = hash_(parent, toks, P);
      nb->tokens.assign(toks, toks + P);
      nb->pages.resize(cfg_.n_layers);
      nb->types.assign(cfg_.n_layers, opt_.type);
      nb->tick = tick_;
      if (parent != 0) {
        Block& p = *blocks_.at(parent);
        if (p.children++ == 0) leaves_.erase({p.tick, p.id});
      }
      leaves_.insert({nb->tick, nb->id});
      index_.insert({nb->hash, nb->id});
      b = nb.get();
      blocks_.emplace(nb->id, std::move(nb));
      ++stats_.inserted_blocks;
    }
    for (int l = 0; l < cfg_.n_layers; ++l) {
      const uint8_t* src = kv.page_data(l, i);
      if (b->pages[l] || !src) continue;
      b->pages[l].reset(new uint8_t[page_bytes_[l]]);
      std::memcpy(b->pages[l].get(), src, page_bytes_[l]);
      b->types[l] = kv.layer_type(l);
      b->bytes += page_bytes_[l];
      bytes_ += page_bytes_[l];
    }
    touch(*b);
    parent = b->id;
  }
  evict_to_limit();
}

int PrefixCache::longest_usable(const std::vector<int32_t>& tokens, const KVCacheOptions& kv_opt,
                                std::vector<Block*>& path) const {
  path.clear();
  if (max_bytes_ == 0) return 0;
  const int P = opt_.page_tokens;
  uint64_t parent = 0;
  for (size_t i = 0; (i + 1) * P < tokens.size() && (i + 1) * P <= static_cast<size_t>(kv_opt.max_tokens); ++i) {
    Block* b = find_child(parent, tokens.data() + i * P);
    if (!b) break;
    path.push_back(b);
    parent = b->id;
  }
  for (int k = static_cast<int>(path.size()); k >= 1; --k) {
    const int L = k * P;
    bool usable = true;
    for (int l = 0; l < cfg_.n_layers && usable; ++l) {
      const KVPageRange r = kv_pages_needed(cfg_, l, L, kv_opt);
      for (int j = r.first; j < r.end && usable; ++j) usable = path[j]->pages[l] != nullptr;
    }
    if (usable) return L;
  }
  return 0;
}

int PrefixCache::load_longest_prefix(const std::vector<int32_t>& tokens, KVCache& kv) {
  std::lock_guard<std::mutex> lock(mu_);
  check_kv(kv, "lookup");
  ++stats_.lookups;
  std::vector<Block*> path;
  const int L = longest_usable(tokens, kv.options(), path);
  if (L == 0) {
    kv.clear();
    return 0;
  }
  const int k = L / opt_.page_tokens;
  kv.import_pages(L, [&](int layer, int page) {
    return KVPageRef{path[page]->pages[layer].get(), path[page]->types[layer]};
  });
  ++tick_;
  for (int j = 0; j < k; ++j) touch(*path[j]);
  stats_.hit_tokens += L;
  return L;
}

int PrefixCache::usable_prefix_length(const std::vector<int32_t>& tokens, const KVCacheOptions& kv_opt) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (kv_opt.type != opt_.type || kv_opt.page_tokens != opt_.page_tokens) return 0;  // load would refuse
  std::vector<Block*> path;
  return longest_usable(tokens, kv_opt, path);
}

size_t PrefixCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

int64_t PrefixCache::blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(blocks_.size());
}

PrefixCache::Stats PrefixCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace eg
