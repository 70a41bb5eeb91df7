#include "server/media_cache.h"

#include <utility>

namespace eg::server {

size_t MediaCache::cost(const std::string& key, const Encoded& media) {
  size_t c = key.size();
  for (const auto& im : media) c += im->soft.size() * sizeof(float) + sizeof(SessionImage);
  return c;
}

MediaCache::Encoded MediaCache::find(const std::string& url) {
  std::lock_guard<std::mutex> lk(mu_);
  const auto it = index_.find(std::string_view(url));
  if (it == index_.end()) {
    ++stats_.misses;
    return {};
  }
  lru_.splice(lru_.begin(), lru_, it->second);  // iterators (and the key view) stay valid
  ++stats_.hits;
  return it->second->media;
}

void MediaCache::insert(const std::string& url, Encoded media) {
  if (media.empty()) return;
  for (const auto& im : media)
    if (!im) return;
  const size_t c = cost(url, media);
  std::lock_guard<std::mutex> lk(mu_);
  if (c > max_bytes_) return;
  if (const auto it = index_.find(std::string_view(url)); it != index_.end()) {
    bytes_ -= it->second->bytes;
    const auto node = it->second;
    index_.erase(it);
    lru_.erase(node);
  }
  evict_to(max_bytes_ - c);
  lru_.push_front(Entry{url, std::move(media), c});
  index_.emplace(std::string_view(lru_.front().url), lru_.begin());
  bytes_ += c;
  ++stats_.inserted;
}

void MediaCache::evict_to(size_t budget) {
  while (bytes_ > budget && !lru_.empty()) {
    const Entry& e = lru_.back();
    index_.erase(std::string_view(e.url));
    bytes_ -= e.bytes;
    lru_.pop_back();
    ++stats_.evicted;
  }
}

MediaCache::Stats MediaCache::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  Stats s = stats_;
  s.bytes = bytes_;
  s.entries = lru_.size();
  return s;
}

std::string media_cache_metrics(const MediaCache::Stats& s) {
  std::string out;
  auto line = [&](const char* name, const char* type, const char* help, uint64_t v) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
           std::to_string(v) + "\n";
  };
  line("edgegemma_media_cache_hits_total", "counter",
       "Images and audio clips found already encoded (by a draft or an earlier request).", s.hits);
  line("edgegemma_media_cache_misses_total", "counter", "Images and audio clips the towers had to encode.", s.misses);
  line("edgegemma_media_cache_inserted_total", "counter", "Encoded media stored in the cache.", s.inserted);
  line("edgegemma_media_cache_evicted_total", "counter", "Encoded media evicted (least recently used).", s.evicted);
  line("edgegemma_media_cache_bytes", "gauge", "Bytes of encoded media held.", s.bytes);
  line("edgegemma_media_cache_entries", "gauge", "Encoded media held.", s.entries);
  return out;
}

}  // namespace eg::server
