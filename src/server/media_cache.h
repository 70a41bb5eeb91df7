// Encoded media kept between requests (docs/server.md "Images encoded on attach"): the vision
// tower's soft tokens of an image_url, keyed by the exact data: URL, and the audio tower's of an
// input_audio part (one entry per clip: its 30 s segments), keyed by "input_audio:" + its data. The web page sends a draft
// (POST /v1/prefill) as soon as a photo is attached, so the tower runs while the user types and
// the request after Enter, or the next turn of the conversation that sends the same image again,
// finds it here instead of decoding and encoding it again.
//
// Keys are compared in full (no hash is trusted: two different images never share an entry).
// Bounded by bytes (soft tokens as float32 plus the key), least recently used first out; an
// entry larger than the whole budget is not kept. A hit returns the same SessionImage (same id).
// Thread-safe.
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/media.h"

namespace eg::server {

class MediaCache {
 public:
  /// max_bytes 0 disables the cache (lookups miss, inserts are dropped).
  explicit MediaCache(size_t max_bytes) : max_bytes_(max_bytes) {}

  using Encoded = std::vector<std::shared_ptr<SessionImage>>;
  /// The encoded medium of `key`, or empty.
  Encoded find(const std::string& key);
  /// Keeps `media` for `key` (replacing an older entry for the same key), evicting the least
  /// recently used entries to stay within max_bytes.
  void insert(const std::string& key, Encoded media);

  struct Stats {
    uint64_t hits = 0, misses = 0, inserted = 0, evicted = 0;
    size_t bytes = 0, entries = 0;
  };
  Stats stats() const;

 private:
  struct Entry {
    std::string url;
    Encoded media;
    size_t bytes = 0;
  };
  static size_t cost(const std::string& key, const Encoded& media);
  void evict_to(size_t budget);  // mu_ held

  const size_t max_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string_view, std::list<Entry>::iterator> index_;  // views into lru_ urls
  size_t bytes_ = 0;
  Stats stats_;
};

/// Prometheus lines for the cache: edgegemma_media_cache_{hits,misses,inserted,evicted}_total
/// and the gauges edgegemma_media_cache_{bytes,entries}.
std::string media_cache_metrics(const MediaCache::Stats& s);

}  // namespace eg::server
