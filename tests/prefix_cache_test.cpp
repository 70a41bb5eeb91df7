// PrefixCache (kv/prefix_cache.h) and the KV page export/import it uses: a request that reuses
// stored prefix pages must give logits and greedy continuations bit-identical (memcmp) to
// prefilling it from scratch, for F16 / F32 / INT8 KV, 16- and 128-token pages, and the four tiny
// models (Gemma 3 sliding windows with recycling, Gemma 4 KV sharing, Gemma 2, Gemma 4 MoE). Also:
// chunked prefill is bit-identical (what makes reuse exact), LRU eviction and byte accounting,
// hash collisions, errors, and a thread-safety smoke test.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "kv/prefix_cache.h"
#include "model/model.h"
#include "test_util.h"

namespace {

std::unique_ptr<eg::Model> load(const std::string& name) {
  return eg::Model::load_dir(egtest::shared_dir() + "/models/" + name);
}

std::vector<int32_t> random_ids(std::mt19937& rng, int n) {
  std::uniform_int_distribution<int32_t> d(1, 8000);  // tiny models: vocabulary 8192
  std::vector<int32_t> v(n);
  for (auto& t : v) t = d(rng);
  return v;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

eg::KVCacheOptions kv_options(eg::KVType t, int page, int max_tokens = 1024) {
  eg::KVCacheOptions o;
  o.type = t;
  o.page_tokens = page;
  o.max_tokens = max_tokens;
  return o;
}

int argmax(const std::vector<float>& v) { return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin()); }

// Logits of the last prompt token, then of 16 greedy steps: the observable output of a request.
std::vector<std::vector<float>> continue_greedy(const eg::Model& m, const std::vector<int32_t>& ids, int from,
                                                eg::KVCache& kv) {
  eg::ForwardScratch s;
  std::vector<float> logits;
  m.forward(ids.data() + from, static_cast<int>(ids.size()) - from, kv, s, eg::LogitsMode::Last, logits);
  std::vector<std::vector<float>> out{logits};
  for (int i = 0; i < 16; ++i) {
    const int32_t next = argmax(logits);
    m.forward(&next, 1, kv, s, eg::LogitsMode::Last, logits);
    out.push_back(logits);
  }
  return out;
}

void expect_bit_identical(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                          const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size());
    EXPECT_EQ(std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)), 0) << what << " step " << i;
  }
}

eg::KVCache prefill(const eg::Model& m, const std::vector<int32_t>& ids, const eg::KVCacheOptions& o) {
  eg::KVCache kv(m.config(), o);
  eg::ForwardScratch s;
  std::vector<float> logits;
  m.forward(ids.data(), static_cast<int>(ids.size()), kv, s, eg::LogitsMode::None, logits);
  return kv;
}

// Loads the longest prefix of `ids` from `pc`, prefills the rest and decodes 16 greedy tokens;
// everything must equal the same request run from scratch. Returns the loaded length.
int check_request(const eg::Model& m, eg::PrefixCache& pc, const std::vector<int32_t>& ids,
                  const eg::KVCacheOptions& o, const std::string& what) {
  eg::KVCache kv(m.config(), o);
  const int U = pc.usable_prefix_length(ids, kv.options());  // what the load will return
  const int L = pc.load_longest_prefix(ids, kv);
  EXPECT_EQ(U, L) << what;
  EXPECT_EQ(kv.n_past(), L);
  EXPECT_EQ(L % o.page_tokens, 0);
  EXPECT_LT(L, static_cast<int>(ids.size()));
  const auto with_cache = continue_greedy(m, ids, L, kv);
  eg::KVCache fresh(m.config(), o);
  const auto scratch = continue_greedy(m, ids, 0, fresh);
  expect_bit_identical(with_cache, scratch, what + " (prefix " + std::to_string(L) + ")");
  return L;
}

using Param = std::tuple<std::string, eg::KVType, int>;
class PrefixReuse : public ::testing::TestWithParam<Param> {};

// The tiny models have a 128-token sliding window; the rollback margin is one page (P). After a
// one-call prefill of n tokens a sliding layer holds pages from ((n-1)/P·P - 128 + 1 - P) / P on,
// and a prefix of L tokens needs its pages from (L - 127) / P on.
TEST_P(PrefixReuse, LoadedPrefixContinuesBitIdentically) {
  const auto [name, type, P] = GetParam();
  auto m = load(name);
  const eg::KVCacheOptions o = kv_options(type, P);
  const std::string what = name + "/" + eg::kv_type_name(type) + "/P" + std::to_string(P);
  std::mt19937 rng(11);
  eg::PrefixCache pc(m->config(), o, size_t{1} << 30);

  // 1. A = system + turn 1 (130 tokens, inside the window + margin: every page kept). B shares
  // its first 130 tokens and goes on past the window (pages are recycled after the load).
  const auto A = random_ids(rng, 130);
  pc.insert(A, prefill(*m, A, o));
  EXPECT_EQ(pc.blocks(), 128 / P);
  const auto B = concat(std::vector<int32_t>(A.begin(), A.begin() + 130), random_ids(rng, 150));
  EXPECT_EQ(check_request(*m, pc, B, o, what + " B"), 128);

  // 2. A long request (300 tokens) whose sliding pages below the window were recycled, and a
  // request sharing 290 of its tokens: the longest prefix whose window pages are still stored.
  const auto A2 = random_ids(rng, 300);
  pc.insert(A2, prefill(*m, A2, o));
  const auto B2 = concat(std::vector<int32_t>(A2.begin(), A2.begin() + 290), random_ids(rng, 30));
  EXPECT_EQ(check_request(*m, pc, B2, o, what + " B2"), P == 16 ? 288 : 256);

  // 3. A request sharing only A2's first 150 tokens: with 16-token pages the window pages it needs
  // (from page (144 - 127) / 16 = 1) were recycled in A2's cache (it kept pages >= 9): no hit.
  // With 128-token pages A2 kept page 0, so 128 tokens load.
  const auto C = concat(std::vector<int32_t>(A2.begin(), A2.begin() + 150), random_ids(rng, 60));
  EXPECT_EQ(check_request(*m, pc, C, o, what + " C"), P == 16 ? 0 : 128);
  // A short request over the same 140 tokens fills the missing pages of the stored blocks.
  const int64_t blocks_before = pc.blocks();
  const auto D = std::vector<int32_t>(A2.begin(), A2.begin() + 140);
  pc.insert(D, prefill(*m, D, o));
  EXPECT_EQ(pc.blocks(), blocks_before);  // no new block, only pages
  EXPECT_EQ(check_request(*m, pc, C, o, what + " C after D"), 128);

  // 4. A request equal to A2 plus a new turn: same tokens, strictly shorter prefix loaded.
  const auto E = concat(A2, random_ids(rng, 5));
  EXPECT_EQ(check_request(*m, pc, E, o, what + " E"), P == 16 ? 288 : 256);
  // 5. Exactly a stored sequence: at least one token must be left to prefill.
  const auto F = std::vector<int32_t>(A.begin(), A.begin() + 128);
  EXPECT_EQ(check_request(*m, pc, F, o, what + " F"), P == 16 ? 112 : 0);

  const auto st = pc.stats();
  EXPECT_EQ(st.lookups, 6);
  EXPECT_EQ(st.evicted_blocks, 0);
  EXPECT_GT(st.hit_tokens, 0);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, PrefixReuse,
                         ::testing::Combine(::testing::Values("tiny-gemma3", "tiny-gemma4", "tiny-gemma2",
                                                              "tiny-gemma4-moe"),
                                            ::testing::Values(eg::KVType::F16, eg::KVType::F32, eg::KVType::INT8),
                                            ::testing::Values(16, 128)),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param) + "_" + eg::kv_type_name(std::get<1>(info.param)) +
                                           "_P" + std::to_string(std::get<2>(info.param));
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

// The exactness of prefix reuse rests on this: prefilling a prompt in different chunkings gives
// bit-identical logits and bit-identical KV pages (F16 KV; also F32 and INT8).
TEST(PrefixCache, ChunkedPrefillIsBitIdenticalInLogitsAndKV) {
  for (const std::string name : {"tiny-gemma3", "tiny-gemma4"}) {
    auto m = load(name);
    std::mt19937 rng(5);
    const auto ids = random_ids(rng, 300);
    for (eg::KVType t : {eg::KVType::F16, eg::KVType::F32, eg::KVType::INT8}) {
      const eg::KVCacheOptions o = kv_options(t, 16);
      auto run = [&](std::vector<int> chunks, std::vector<float>& logits) {
        eg::KVCache kv(m->config(), o);
        eg::ForwardScratch s;
        int at = 0;
        for (int c : chunks) {
          m->forward(ids.data() + at, c, kv, s, eg::LogitsMode::Last, logits);
          at += c;
        }
        return kv;
      };
      std::vector<float> l_all, l_7, l_odd;
      const eg::KVCache all = run({300}, l_all);
      const eg::KVCache c7 = run({7, 293}, l_7);
      const eg::KVCache odd = run({1, 1, 1, 30, 100, 3, 164}, l_odd);
      const std::string what = name + "/" + eg::kv_type_name(t);
      EXPECT_EQ(std::memcmp(l_all.data(), l_7.data(), l_all.size() * sizeof(float)), 0) << what;
      EXPECT_EQ(std::memcmp(l_all.data(), l_odd.data(), l_all.size() * sizeof(float)), 0) << what;
      int compared = 0;
      for (int l = 0; l < all.n_layers(); ++l)
        for (int j = 0; j < 300 / 16; ++j) {  // full pages (the last partial page's tail is unused)
          const uint8_t* a = all.page_data(l, j);
          const uint8_t* b = c7.page_data(l, j);
          const uint8_t* c = odd.page_data(l, j);
          ASSERT_EQ(a == nullptr, b == nullptr) << what << " layer " << l << " page " << j;
          ASSERT_EQ(a == nullptr, c == nullptr) << what << " layer " << l << " page " << j;
          if (!a) continue;
          EXPECT_EQ(std::memcmp(a, b, all.page_bytes(l)), 0) << what << " layer " << l << " page " << j;
          EXPECT_EQ(std::memcmp(a, c, all.page_bytes(l)), 0) << what << " layer " << l << " page " << j;
          ++compared;
        }
      EXPECT_GT(compared, 18);
    }
  }
}

// Bytes of one block with every page present (all layers that own storage).
size_t block_bytes(const eg::ModelConfig& cfg, const eg::KVCacheOptions& o) {
  size_t b = 0;
  for (int l = 0; l < cfg.n_layers; ++l) b += eg::kv_page_bytes(cfg, l, o);
  return b;
}

TEST(PrefixCache, ByteAccountingCountsStoredPagesOnly) {
  auto m = load("tiny-gemma3");  // 5 sliding layers + 1 global, all with the same page size
  const eg::KVCacheOptions o = kv_options(eg::KVType::F16, 16);
  const size_t pb = eg::kv_page_bytes(m->config(), 0, o);
  ASSERT_EQ(pb, 2u * 16 * m->config().layers[0].n_kv_heads * m->config().layers[0].head_dim * 2);
  eg::PrefixCache pc(m->config(), o, size_t{1} << 30);
  std::mt19937 rng(1);
  const auto A = random_ids(rng, 300);
  pc.insert(A, prefill(*m, A, o));
  // 18 full blocks; the global layer kept all 18 pages, the sliding layers pages 9..17 (the last
  // begin_append at 288 recycled pages below (288 - 127 - 16) / 16 = 9).
  EXPECT_EQ(pc.blocks(), 18);
  EXPECT_EQ(pc.bytes(), (18 * 1 + 9 * 5) * pb);
  // Inserting the same sequence again stores nothing new.
  pc.insert(A, prefill(*m, A, o));
  EXPECT_EQ(pc.blocks(), 18);
  EXPECT_EQ(pc.stats().inserted_blocks, 18);
  // A 100-token prefix has every page: fills pages 0..5 of the sliding layers.
  const std::vector<int32_t> head(A.begin(), A.begin() + 100);
  pc.insert(head, prefill(*m, head, o));
  EXPECT_EQ(pc.bytes(), (18 * 1 + 15 * 5) * pb);
  // tokens.size() may exceed n_past (only the stored positions count); fewer is an error.
  EXPECT_THROW(pc.insert(std::vector<int32_t>(A.begin(), A.begin() + 50), prefill(*m, head, o)), eg::Error);
}

TEST(PrefixCache, EvictsLeastRecentlyUsedLeafBlocks) {
  auto m = load("tiny-gemma3");
  const eg::KVCacheOptions o = kv_options(eg::KVType::F16, 16);
  const size_t bb = block_bytes(m->config(), o);
  eg::PrefixCache pc(m->config(), o, 5 * bb);
  std::mt19937 rng(2);
  const auto X = random_ids(rng, 48), Y = random_ids(rng, 48), Z = random_ids(rng, 32);
  auto lookup = [&](const std::vector<int32_t>& ids) {
    eg::KVCache kv(m->config(), o);
    return pc.load_longest_prefix(concat(ids, {7}), kv);
  };
  pc.insert(X, prefill(*m, X, o));
  pc.insert(Y, prefill(*m, Y, o));  // 6 blocks > 5: X's last block (the LRU leaf) goes
  EXPECT_EQ(pc.blocks(), 5);
  EXPECT_EQ(pc.bytes(), 5 * bb);
  EXPECT_EQ(pc.stats().evicted_blocks, 1);
  EXPECT_EQ(lookup(X), 32);  // touches X's two blocks: now Y's are the least recently used
  EXPECT_EQ(pc.usable_prefix_length(concat(Y, {7}), o), 48);  // a query: touches nothing
  EXPECT_EQ(pc.usable_prefix_length(concat(Y, {7}), kv_options(eg::KVType::F32, 16)), 0);  // other type
  pc.insert(Z, prefill(*m, Z, o));  // 7 blocks: Y's last two go (leaf first, then its parent)
  EXPECT_EQ(pc.blocks(), 5);
  EXPECT_EQ(pc.bytes(), 5 * bb);
  EXPECT_EQ(pc.stats().evicted_blocks, 3);
  EXPECT_EQ(lookup(Y), 16);
  EXPECT_EQ(lookup(X), 32);
  EXPECT_EQ(lookup(Z), 32);
  // One request larger than the whole budget keeps only what fits: its blocks are equally recent
  // and leaves go first, so its first blocks stay.
  eg::PrefixCache small(m->config(), o, 2 * bb);
  const auto big = random_ids(rng, 80);
  small.insert(big, prefill(*m, big, o));
  EXPECT_EQ(small.blocks(), 2);
  eg::KVCache kv(m->config(), o);
  EXPECT_EQ(small.load_longest_prefix(big, kv), 32);
  // Disabled (0 bytes): stores nothing, loads nothing.
  eg::PrefixCache off(m->config(), o, 0);
  off.insert(X, prefill(*m, X, o));
  EXPECT_EQ(off.blocks(), 0);
  EXPECT_EQ(off.bytes(), 0u);
  eg::KVCache kv2 = prefill(*m, X, o);
  EXPECT_EQ(off.load_longest_prefix(concat(X, {1}), kv2), 0);
  EXPECT_EQ(kv2.n_past(), 0);  // cleared
}

// Every block in one hash bucket: entries are verified by their tokens and parent.
uint64_t constant_hash(uint64_t, const int32_t*, int) { return 42; }

TEST(PrefixCache, HashCollisionsNeverGiveAFalseHit) {
  auto m = load("tiny-gemma3");
  const eg::KVCacheOptions o = kv_options(eg::KVType::F16, 16);
  for (eg::PrefixCache::BlockHash h : {static_cast<eg::PrefixCache::BlockHash>(nullptr), &constant_hash}) {
    eg::PrefixCache pc(m->config(), o, size_t{1} << 30, h);
    std::mt19937 rng(9);
    const auto X = random_ids(rng, 48), Y = random_ids(rng, 48);
    pc.insert(X, prefill(*m, X, o));
    pc.insert(Y, prefill(*m, Y, o));
    EXPECT_EQ(pc.blocks(), 6);
    // Same length, other tokens: nothing.
    EXPECT_EQ(check_request(*m, pc, random_ids(rng, 49), o, "unrelated"), 0);
    // Y's second block after X's first: only X's first block matches.
    auto mixed = concat(std::vector<int32_t>(X.begin(), X.begin() + 16), std::vector<int32_t>(Y.begin() + 16, Y.end()));
    EXPECT_EQ(check_request(*m, pc, concat(mixed, {3}), o, "mixed"), 16);
    // One token changed in the middle of X's third block.
    auto x2 = concat(X, {3});
    x2[40] = x2[40] == 5 ? 6 : 5;
    EXPECT_EQ(check_request(*m, pc, x2, o, "changed token"), 32);
    EXPECT_EQ(check_request(*m, pc, concat(Y, {3}), o, "Y"), 48);
  }
}

TEST(PrefixCache, MismatchedCachesAreErrors) {
  auto m = load("tiny-gemma3");
  auto g2 = load("tiny-gemma2");
  const eg::KVCacheOptions o = kv_options(eg::KVType::F16, 16);
  eg::PrefixCache pc(m->config(), o, size_t{1} << 30);
  std::mt19937 rng(4);
  const auto X = random_ids(rng, 40);
  EXPECT_THROW(pc.insert(X, prefill(*m, X, kv_options(eg::KVType::F32, 16))), eg::Error);
  EXPECT_THROW(pc.insert(X, prefill(*m, X, kv_options(eg::KVType::F16, 32))), eg::Error);
  EXPECT_THROW(pc.insert(X, prefill(*g2, X, o)), eg::Error);
  pc.insert(X, prefill(*m, X, o));
  eg::KVCache wrong = prefill(*m, X, kv_options(eg::KVType::INT8, 16));
  EXPECT_THROW(pc.load_longest_prefix(concat(X, {1}), wrong), eg::Error);
  EXPECT_EQ(wrong.n_past(), 40);  // untouched
  // import_pages: a missing required page is an error and leaves the cache as it was.
  eg::KVCache kv = prefill(*m, X, o);
  EXPECT_THROW(kv.import_pages(32, [](int, int) { return eg::KVPageRef{}; }), eg::Error);
  EXPECT_EQ(kv.n_past(), 40);
  EXPECT_THROW(kv.import_pages(5000, [](int, int) { return eg::KVPageRef{}; }), eg::Error);
}

// The pages the import needs: window pages of sliding layers, all pages of global layers, none of
// KV-shared layers (tiny-gemma4's last two layers).
TEST(PrefixCache, NeededAndHeldPageRanges) {
  auto m = load("tiny-gemma4");
  const eg::ModelConfig& c = m->config();
  const eg::KVCacheOptions o = kv_options(eg::KVType::F16, 16);
  for (int l = 0; l < c.n_layers; ++l) {
    const auto need = eg::kv_pages_needed(c, l, 288, o), held = eg::kv_pages_held(c, l, 288, o);
    if (c.layers[l].kv_source >= 0) {
      EXPECT_EQ(need.end, 0);
      EXPECT_EQ(held.end, 0);
    } else if (c.layers[l].type == eg::LayerType::Sliding) {
      EXPECT_EQ(need.first, (288 - 127) / 16);
      EXPECT_EQ(held.first, (272 - 127 - 16) / 16);
      EXPECT_EQ(need.end, 18);
    } else {
      EXPECT_EQ(need.first, 0);
      EXPECT_EQ(held.first, 0);
      EXPECT_EQ(need.end, 18);
    }
  }
  // A one-call prefill holds exactly kv_pages_held.
  std::mt19937 rng(8);
  const auto ids = random_ids(rng, 288);
  const eg::KVCache kv = prefill(*m, ids, o);
  for (int l = 0; l < c.n_layers; ++l) {
    const auto held = eg::kv_pages_held(c, l, 288, o);
    for (int j = 0; j < 18; ++j)
      EXPECT_EQ(kv.page_data(l, j) != nullptr, j >= held.first && j < held.end) << "layer " << l << " page " << j;
  }
}

// A loaded prefix also brings the sliding layers' rollback-margin pages that are stored, so a
// truncate() into the margin right after the load stays exact (no re-prefill).
TEST(PrefixCache, LoadedCacheTruncatesExactlyIntoTheMargin) {
  auto m = load("tiny-gemma3");
  const eg::KVCacheOptions o = kv_options(eg::KVType::F16, 16);
  eg::PrefixCache pc(m->config(), o, size_t{1} << 30);
  std::mt19937 rng(12);
  const auto A = random_ids(rng, 300);
  pc.insert(A, prefill(*m, A, o));  // sliding pages 9..17 stored
  eg::KVCache kv(m->config(), o);
  ASSERT_EQ(pc.load_longest_prefix(concat(A, {5}), kv), 288);
  // Needed from page (288 - 127) / 16 = 10; page 9 of the margin came along, page 8 was not stored.
  EXPECT_EQ(kv.first_live_position(0), 9 * 16);
  EXPECT_EQ(kv.truncate(283), 283);  // needs positions from 156 >= 144
  const auto B = concat(std::vector<int32_t>(A.begin(), A.begin() + 283), random_ids(rng, 20));
  const auto with_cache = continue_greedy(*m, B, 283, kv);
  eg::KVCache fresh(m->config(), o);
  expect_bit_identical(with_cache, continue_greedy(*m, B, 0, fresh), "after truncate");
  // Truncating below what the stored pages cover falls back to 0 (re-prefill), as kv_cache.h says.
  eg::KVCache kv2(m->config(), o);
  ASSERT_EQ(pc.load_longest_prefix(concat(A, {5}), kv2), 288);
  EXPECT_EQ(kv2.truncate(260), 0);
}

TEST(PrefixCache, ThreadSafetySmoke) {
  auto m = load("tiny-gemma3");
  const eg::KVCacheOptions o = kv_options(eg::KVType::F16, 16);
  eg::PrefixCache pc(m->config(), o, 12 * block_bytes(m->config(), o));  // forces evictions
  std::mt19937 rng(6);
  const auto shared = random_ids(rng, 32);
  std::vector<std::vector<int32_t>> seqs;
  std::vector<eg::KVCache> caches;
  for (int t = 0; t < 4; ++t) {
    seqs.push_back(concat(shared, random_ids(rng, 40 + 16 * t)));
    caches.push_back(prefill(*m, seqs.back(), o));
  }
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      eg::KVCache kv(m->config(), o);
      for (int it = 0; it < 200; ++it) {
        pc.insert(seqs[t], caches[t]);
        const int L = pc.load_longest_prefix(concat(seqs[t], {1}), kv);
        if (L % 16 != 0 || L > static_cast<int>(seqs[t].size())) ++bad;
        for (int l = 0; l < kv.n_layers(); ++l)  // loaded pages are this sequence's pages
          for (int j = 0; j < L / 16; ++j)
            if (std::memcmp(kv.page_data(l, j), caches[t].page_data(l, j), kv.page_bytes(l)) != 0) ++bad;
        (void)pc.bytes();
        (void)pc.stats();
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LE(pc.bytes(), 12 * block_bytes(m->config(), o));
  EXPECT_EQ(pc.stats().lookups, 800);
}

}  // namespace
