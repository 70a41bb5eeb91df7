// Open-addressing hash tables used by the tokenizer (internal header).
//
// StringIdMap: string -> id, with the keys copied into one arena. PairMap: (id, id) -> (rank, new id) for BPE
// merges. Both are built once at load time and then only read.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace eg::tok {

inline uint64_t hash_bytes(const char* p, size_t n) {
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  uint64_t h = 0x243F6A8885A308D3ull ^ (n * kMul);
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    h = (h ^ v) * kMul;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    uint64_t v = 0;
    std::memcpy(&v, p, n);
    h = (h ^ v) * kMul;
    h ^= h >> 29;
  }
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 32);
}

/// Keys are copied into the map's own contiguous arena, next to nothing else, so a lookup
/// touches one slot and one run of key bytes (the vocabulary is large: lookups are cache misses).
class StringIdMap {
 public:
  void init(size_t expected, size_t expected_bytes = 0) {
    size_t cap = 16;
    while (cap < expected * 2) cap <<= 1;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    size_ = 0;
    arena_.clear();
    arena_.reserve(expected_bytes);
  }
  size_t size() const { return size_; }

  /// Inserts key -> id. An existing key keeps its id unless `overwrite`. Returns true if new.
  bool insert(std::string_view key, int32_t id, bool overwrite = true) {
    return insert(key, id, hash_bytes(key.data(), key.size()), overwrite);
  }
  /// The same with the key's hash() already computed.
  bool insert(std::string_view key, int32_t id, uint64_t h, bool overwrite = true) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.id < 0) {
        s = Slot{tag, id, static_cast<uint32_t>(key.size()), static_cast<uint32_t>(arena_.size())};
        arena_.append(key);
        ++size_;
        return true;
      }
      if (s.tag == tag && key_of(s) == key) {
        if (overwrite) s.id = id;
        return false;
      }
    }
  }

  /// Id of `key`, or -1.
  int32_t find(std::string_view key) const { return find(key, hash_bytes(key.data(), key.size())); }

  /// For batched lookups: hash keys first, prefetch their slots, then find with the hash.
  static uint64_t hash(std::string_view key) { return hash_bytes(key.data(), key.size()); }
  void prefetch(uint64_t h) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[h & mask_]);
  }
  int32_t find(std::string_view key, uint64_t h) const {
    if (slots_.empty()) return -1;
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (s.tag == tag && key_of(s) == key) return s.id;
    }
  }

 private:
  struct Slot {
    uint32_t tag = 0;
    int32_t id = -1;
    uint32_t len = 0;
    uint32_t off = 0;  // key bytes at arena_[off, off + len)
  };
  std::string_view key_of(const Slot& s) const { return std::string_view(arena_.data() + s.off, s.len); }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    std::string old_arena = std::move(arena_);
    init(old.empty() ? 8 : old.size(), old_arena.size());
    for (const Slot& s : old)
      if (s.id >= 0) insert(std::string_view(old_arena.data() + s.off, s.len), s.id);
  }
  std::vector<Slot> slots_;
  std::string arena_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

struct MergeInfo {
  uint32_t rank;
  int32_t new_id;
};

class PairMap {
 public:
  void init(size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2) cap <<= 1;
    keys_.assign(cap, kEmpty);
    vals_.assign(cap, MergeInfo{0, -1});
    mask_ = cap - 1;
    size_ = 0;
  }
  size_t size() const { return size_; }

  /// Inserts or overwrites (a later merge of the same pair replaces an earlier one, as HF's
  /// HashMap collect does).
  void insert(int32_t a, int32_t b, MergeInfo v) {
    if ((size_ + 1) * 2 > keys_.size()) grow();
    const uint64_t k = key(a, b);
    for (size_t i = slot(k);; i = (i + 1) & mask_) {
      if (keys_[i] == kEmpty) {
        keys_[i] = k;
        vals_[i] = v;
        ++size_;
        return;
      }
      if (keys_[i] == k) {
        vals_[i] = v;
        return;
      }
    }
  }

  void prefetch(int32_t a, int32_t b) const {
    if (!keys_.empty()) {
      const size_t i = slot(key(a, b));
      __builtin_prefetch(&keys_[i]);
      __builtin_prefetch(&vals_[i]);
    }
  }

  /// Calls f(left id, right id, info) for every merge (in no particular order).
  template <class F>
  void for_each(F&& f) const {
    for (size_t i = 0; i < keys_.size(); ++i)
      if (keys_[i] != kEmpty)
        f(static_cast<int32_t>(keys_[i] >> 32), static_cast<int32_t>(keys_[i] & 0xFFFFFFFFu), vals_[i]);
  }

  const MergeInfo* find(int32_t a, int32_t b) const {
    if (keys_.empty()) return nullptr;
    const uint64_t k = key(a, b);
    for (size_t i = slot(k);; i = (i + 1) & mask_) {
      if (keys_[i] == k) return &vals_[i];
      if (keys_[i] == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  size_t slot(uint64_t k) const {
    uint64_t h = k * 0x9E3779B97F4A7C15ull;
    return (h ^ (h >> 31)) & mask_;
  }
  void grow() {
    std::vector<uint64_t> ok = std::move(keys_);
    std::vector<MergeInfo> ov = std::move(vals_);
    init(ok.empty() ? 8 : ok.size());
    for (size_t i = 0; i < ok.size(); ++i)
      if (ok[i] != kEmpty)
        insert(static_cast<int32_t>(ok[i] >> 32), static_cast<int32_t>(ok[i] & 0xFFFFFFFFu), ov[i]);
  }
  std::vector<uint64_t> keys_;
  std::vector<MergeInfo> vals_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace eg::tok
