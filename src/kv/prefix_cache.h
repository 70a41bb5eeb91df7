// Prefix cache: KV pages of common prompt prefixes (system prompts, earlier turns) kept across
// requests, so that a new request prefills only what follows the longest stored prefix
// (issue 6 §3). Used by the server's scheduler beside each slot's own KVCache.
//
// Storage unit: a block = one KV page of every layer that owns storage, for the page_tokens
// positions [i·P, (i+1)·P) of a token sequence (P = page_tokens; only full pages are stored). The
// blocks form a trie: block i of a sequence is keyed by (its parent block, its P token ids), found
// through a hash of the two (a chain of hashes over the blocks), and always verified by comparing
// the parent and the token ids, so a hash collision can never return another prefix's KV.
//
// Why reusing pages is exact: position t's K/V depends only on tokens 0..t (causal attention), and
// the forward pass is bit-identical however a prompt is split into chunks (model.h, kv_cache.h;
// tested in tests/prefix_cache_test.cpp). So the page of block i computed by any request with the
// same first (i+1)·P tokens holds the same bytes, and a cache rebuilt from stored pages
// (KVCache::import_pages) continues exactly as if it had prefilled the prefix itself: logits are
// byte-identical with the prefix cache on or off.
//
// Exception: an F16 cache layer that overflowed was switched to BF16 (kv_cache.h, "Range"), and
// its pages were re-encoded. Each stored page keeps its encoding (KVCache::layer_type at insert);
// import_pages gives a layer with any BF16 page BF16 and re-encodes its F16 pages, so encodings
// never mix, and the continuation equals the source cache's up to that BF16 rounding.
//
// Sliding-window layers recycle pages below their window, so a stored block may lack those layers'
// pages (insert stores what the cache still has, and fills such gaps when a later insert has them).
// A prefix of L = k·P tokens is usable only if every page kv_pages_needed(cfg, layer, L, ...) names
// is stored: all k pages of each global layer, and for each sliding layer the pages of the window
// that a query at position L sees; the sliding layers' rollback-margin pages below the window are
// loaded too when stored (KVCache::import_pages). KV-shared layers (Gemma 4) own no pages.
//
// Memory: bytes() is the sum of the stored page bytes and never exceeds max_bytes after an insert.
// Eviction is least-recently-used over leaf blocks: a block is "used" when an insert or a lookup
// walks through it, and a walk touches all its ancestors too, so a parent is never older than its
// children; evicting leaves first therefore removes a prefix's descendants before the prefix itself
// (no unreachable block is ever kept).
//
// Thread-safe: every public member function takes one internal mutex.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache.h"
#include "model/config.h"

namespace eg {

class PrefixCache {
 public:
  /// Hash of one block: the parent block's id (0 for the first block) and its n token ids. Only a
  /// lookup key: entries are verified by comparing tokens. Replaceable for tests (collisions).
  using BlockHash = uint64_t (*)(uint64_t parent_id, const int32_t* tokens, int n);

  /// A store for caches of `cfg` with kv_opt's KV type and page size (blocks of
  /// kv_opt.page_tokens tokens), holding at most max_bytes of page data (0 = disabled: insert
  /// stores nothing, lookups load nothing). `hash` = nullptr uses the default 64-bit hash.
  /// Throws eg::Error on bad options.
  PrefixCache(const ModelConfig& cfg, const KVCacheOptions& kv_opt, size_t max_bytes, BlockHash hash = nullptr);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  /// Stores the KV of every full page-aligned block of tokens[0, kv.n_past()) not stored yet (and
  /// fills in pages of stored blocks that were missing), where tokens[0, kv.n_past()) are the ids
  /// `kv` holds. Marks the blocks walked most recently used, then evicts least-recently-used
  /// blocks until bytes() <= max_bytes (possibly some just inserted). Throws eg::Error, storing
  /// nothing, if tokens.size() < kv.n_past() or kv's type / page size / layer shapes differ from
  /// this cache's.
  void insert(const std::vector<int32_t>& tokens, const KVCache& kv);

  /// Finds the longest stored page-aligned prefix of `tokens` with length L < tokens.size() (at
  /// least one token is left to prefill) and L <= kv.max_tokens() that is usable (every page the
  /// next token's attention reads is stored; see above), loads it into `kv` (cleared
  /// first; KVCache::import_pages) and returns L; the caller then runs forward() on
  /// tokens[L, ...). Returns 0 with `kv` cleared when nothing fits. Marks the blocks of the loaded
  /// prefix most recently used. Throws eg::Error (kv unchanged) if kv's type / page size / layer
  /// shapes differ from this cache's.
  int load_longest_prefix(const std::vector<int32_t>& tokens, KVCache& kv);

  /// The length load_longest_prefix(tokens, kv) would return for a cache with options kv_opt,
  /// without loading anything or touching the LRU order or the stats (the scheduler compares it
  /// with what a slot already holds before giving up the slot's own KV). 0 when kv_opt's type or
  /// page size differ from this cache's (a load would throw).
  int usable_prefix_length(const std::vector<int32_t>& tokens, const KVCacheOptions& kv_opt) const;

  /// Bytes of page data stored (the sum of page_bytes of every stored page).
  size_t bytes() const;
  /// Number of stored blocks.
  int64_t blocks() const;
  size_t max_bytes() const { return max_bytes_; }

  struct Stats {
    int64_t lookups = 0;          // load_longest_prefix calls
    int64_t hit_tokens = 0;       // sum of the lengths returned
    int64_t inserted_blocks = 0;  // blocks created by insert
    int64_t evicted_blocks = 0;   // blocks removed to stay under max_bytes
  };
  Stats stats() const;

 private:
  struct Block;
  void check_kv(const KVCache& kv, const char* what) const;
  Block* find_child(uint64_t parent, const int32_t* toks) const;
  // The longest usable stored prefix of tokens for a cache with kv_opt (0: none); path = its blocks.
  int longest_usable(const std::vector<int32_t>& tokens, const KVCacheOptions& kv_opt, std::vector<Block*>& path) const;
  void evict_to_limit();
  void remove_block(uint64_t id);
  void touch(Block& b);

  ModelConfig cfg_;
  KVCacheOptions opt_;
  size_t max_bytes_;
  BlockHash hash_;
  std::vector<size_t> page_bytes_;  // per layer (0: KV-shared)

  mutable std::mutex mu_;
  std::unordered_map<uint64_t, std::unique_ptr<Block>> blocks_;  // by block id (never 0, never reused)
  std::unordered_multimap<uint64_t, uint64_t> index_;              // hash -> block id
  std::set<std::pair<uint64_t, uint64_t>> leaves_;                 // (last use, id) of childless blocks
  uint64_t next_id_ = 1;
  uint64_t tick_ = 0;
  size_t bytes_ = 0;
  Stats stats_;
};

}  // namespace eg
