// server/media_cache.h: least-recently-used eviction by bytes, refresh on a hit, replacement of a
// key, entries above the budget not kept, the cache off at 0 bytes, and the counters.
#include "server/media_cache.h"

#include <gtest/gtest.h>

#include <memory>

namespace {

using eg::server::MediaCache;

MediaCache::Encoded medium(int floats, uint64_t id) {
  auto im = std::make_shared<eg::SessionImage>();
  im->id = id;
  im->n = 1;
  im->soft.assign(static_cast<size_t>(floats), 0.5f);
  return {im};
}

// Bytes one entry of `floats` soft values under key `k` costs (the documented rule).
size_t cost(const std::string& k, int floats) { return k.size() + floats * sizeof(float) + sizeof(eg::SessionImage); }

TEST(MediaCache, EvictsLeastRecentlyUsedByBytes) {
  const size_t budget = cost("a", 1000) * 2 + 10;  // room for two entries of 1000 floats
  MediaCache c(budget);
  c.insert("a", medium(1000, 1));
  c.insert("b", medium(1000, 2));
  ASSERT_EQ(c.find("a").at(0)->id, 1u);  // a is now the most recent
  c.insert("c", medium(1000, 3));       // evicts b
  EXPECT_TRUE(c.find("b").empty());
  EXPECT_EQ(c.find("a").at(0)->id, 1u);
  EXPECT_EQ(c.find("c").at(0)->id, 3u);
  const auto st = c.stats();
  EXPECT_EQ(st.entries, 2u);
  EXPECT_EQ(st.bytes, cost("a", 1000) + cost("c", 1000));
  EXPECT_EQ(st.evicted, 1u);
  EXPECT_EQ(st.inserted, 3u);
  EXPECT_EQ(st.hits, 3u);
  EXPECT_EQ(st.misses, 1u);
}

TEST(MediaCache, ReplacesAKeyAndKeepsNothingAboveTheBudget) {
  MediaCache c(cost("k", 100) + 5);
  c.insert("k", medium(10, 1));
  c.insert("k", medium(100, 2));  // same key: replaced, not added
  EXPECT_EQ(c.stats().entries, 1u);
  EXPECT_EQ(c.find("k").at(0)->id, 2u);
  c.insert("big", medium(1000, 3));  // larger than the whole cache: not kept, nothing evicted
  EXPECT_TRUE(c.find("big").empty());
  EXPECT_EQ(c.find("k").at(0)->id, 2u);
  // Keys are compared in full: a prefix or an extension of a key is another key.
  EXPECT_TRUE(c.find("").empty());
  EXPECT_TRUE(c.find("kk").empty());
  // Multi-segment media (an audio clip) come back whole.
  MediaCache a(1 << 20);
  MediaCache::Encoded clip = medium(10, 7);
  clip.push_back(medium(20, 8)[0]);
  a.insert("input_audio:xyz", clip);
  const auto got = a.find("input_audio:xyz");
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1]->id, 8u);
  EXPECT_EQ(a.stats().bytes, cost("input_audio:xyz", 30) + sizeof(eg::SessionImage));
}

TEST(MediaCache, ZeroBytesIsOff) {
  MediaCache c(0);
  c.insert("a", medium(1, 1));
  EXPECT_TRUE(c.find("a").empty());
  EXPECT_EQ(c.stats().entries, 0u);
  EXPECT_EQ(c.stats().inserted, 0u);
}

}  // namespace
