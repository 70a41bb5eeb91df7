// The paged KV cache (kv/kv_cache.h): accounting equals kv_bytes_for_context, sliding layers stay
// bounded, KV-shared layers allocate nothing, truncate() keeps exactly what a re-prefill needs,
// save/load round trips bit-identically, and model outputs do not depend on the page size.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "engine/sampler.h"
#include "model/known_models.h"
#include "model/model.h"
#include "test_util.h"

namespace {

// A Gemma-3-like config: `n` layers, every `every`-th full, the rest sliding (window W); full
// layers may have another head_dim; the last `shared` layers read earlier layers' K/V.
eg::ModelConfig synthetic(int n, int every, int W, int full_hd, int shared) {
  eg::ModelConfig c;
  c.n_layers = n;
  c.sliding_window = W;
  for (int i = 0; i < n; ++i) {
    eg::LayerConfig l;
    l.type = (i + 1) % every == 0 ? eg::LayerType::Full : eg::LayerType::Sliding;
    l.n_kv_heads = l.type == eg::LayerType::Full ? 1 : 2;
    l.head_dim = l.type == eg::LayerType::Full ? full_hd : 16;
    c.layers.push_back(l);
  }
  for (int i = n - shared; i < n; ++i) {  // like Gemma 4: the last non-shared layer of the same type
    for (int j = n - shared - 1; j >= 0; --j)
      if (c.layers[j].type == c.layers[i].type) {
        c.layers[i].kv_source = j;
        c.layers[i].n_kv_heads = c.layers[j].n_kv_heads;
        c.layers[i].head_dim = c.layers[j].head_dim;
        break;
      }
  }
  return c;
}

// Advances the cache by `n` positions (page-aligned batches of random size) without writing data.
void advance(eg::KVCache& kv, int n, std::mt19937& rng, int max_batch = 40) {
  const int P = kv.options().page_tokens;
  const int end = kv.n_past() + n;
  while (kv.n_past() < end) {
    const int p = kv.n_past();
    int T = std::min(end - p, 1 + static_cast<int>(rng() % max_batch));
    T = std::min(T, P - p % P);
    kv.begin_append(p, T);
    kv.commit(p + T);
  }
}

// Independent count of the bytes the cache must hold for `tokens` positions: per owning layer,
// full layers ceil(tokens/P) pages; sliding layers the largest number of pages live at once, a
// page being live from its first position until the position a - W + 1 - M (a = start of a later
// page) passes its end.
size_t expected_bytes(const eg::ModelConfig& c, int tokens, const eg::KVCacheOptions& o) {
  const int P = o.page_tokens, M = o.rollback_margin_tokens < 0 ? P : o.rollback_margin_tokens;
  size_t total = 0;
  for (int i = 0; i < c.n_layers; ++i) {
    const auto& l = c.layers[i];
    if (l.kv_source >= 0) continue;
    const size_t es = o.type == eg::KVType::F32 ? 4 : o.type == eg::KVType::INT8 ? 1 : 2;
    size_t page = 2 * static_cast<size_t>(P) * l.n_kv_heads * l.head_dim * es;
    if (o.type == eg::KVType::INT8) page = (page + 7) / 8 * 8 + 2 * static_cast<size_t>(P) * l.n_kv_heads * 4;
    const int n_pages = (tokens + P - 1) / P;
    int pages = n_pages;
    if (l.type == eg::LayerType::Sliding) {
      pages = 0;
      for (int k = 0; k < n_pages; ++k) {
        int live = 0;
        for (int j = 0; j <= k; ++j) live += (j + 1) * P > k * P - c.sliding_window + 1 - M;
        pages = std::max(pages, live);
      }
    }
    total += page * pages;
  }
  return total;
}

TEST(KVCache, AccountingEqualsKvBytesForContext) {
  std::mt19937 rng(1);
  const eg::ModelConfig cfgs[] = {synthetic(6, 6, 20, 16, 0), synthetic(7, 2, 9, 32, 2), synthetic(4, 2, 128, 64, 0)};
  for (const auto& cfg : cfgs)
    for (eg::KVType t : {eg::KVType::F16, eg::KVType::BF16, eg::KVType::F32, eg::KVType::INT8})
      for (int P : {1, 3, 16, 128})
        for (int extra : {0, 5, 200}) {
          eg::KVCacheOptions o;
          o.type = t;
          o.page_tokens = P;
          o.rollback_margin_tokens = extra == 0 ? -1 : P + extra;
          o.max_tokens = 700;
          eg::KVCache kv(cfg, o);
          EXPECT_EQ(kv.bytes_reserved(), 0u);
          while (kv.n_past() < 700) {
            advance(kv, 1 + static_cast<int>(rng() % 90) % (700 - kv.n_past()), rng);
            const size_t want = expected_bytes(cfg, kv.n_past(), o);
            ASSERT_EQ(kv.bytes_reserved(), want) << "P " << P << " n " << kv.n_past();
            ASSERT_EQ(eg::kv_bytes_for_context(cfg, kv.n_past(), o), want);
            ASSERT_LE(kv.bytes_in_use(), kv.bytes_reserved());
          }
          // Reserved pages survive clear() and are reused: refilling allocates nothing new.
          const size_t reserved = kv.bytes_reserved();
          const int64_t pages = kv.pages_reserved();
          kv.clear();
          EXPECT_EQ(kv.bytes_in_use(), 0u);
          EXPECT_EQ(kv.pages_in_use(), 0);
          advance(kv, 700, rng, 1);  // token by token this time
          EXPECT_EQ(kv.bytes_reserved(), reserved);
          EXPECT_EQ(kv.pages_reserved(), pages);
          kv.clear();
          kv.release_free_pages();
          EXPECT_EQ(kv.bytes_reserved(), 0u);
        }
}

TEST(KVCache, AccountingOfReleasedModelConfigs) {
  std::mt19937 rng(2);
  for (const char* name : {"gemma-3-1b", "gemma-4-e2b", "gemma-2-2b"}) {
    const eg::ModelConfig cfg = eg::parse_hf_config(eg::known_model_config(name).dump(),
                                                    eg::known_model_generation_config(name).dump(), name);
    for (eg::KVType t : {eg::KVType::F16, eg::KVType::INT8}) {
      eg::KVCacheOptions o;
      o.type = t;
      o.max_tokens = 5000;
      eg::KVCache kv(cfg, o);
      for (int n : {1, 127, 128, 129, 1000, 1023, 4321, 5000}) {
        advance(kv, n - kv.n_past(), rng, 300);
        ASSERT_EQ(kv.bytes_reserved(), eg::kv_bytes_for_context(cfg, n, o)) << name << " " << n;
        ASSERT_EQ(kv.bytes_reserved(), expected_bytes(cfg, n, o)) << name << " " << n;
      }
    }
  }
}

TEST(KVCache, SlidingLayersStayBoundedAndFullLayersGrow) {
  std::mt19937 rng(3);
  const int W = 50, P = 16, M = 32, n = 5000;
  const eg::ModelConfig cfg = synthetic(6, 6, W, 16, 0);
  eg::KVCacheOptions o;
  o.type = eg::KVType::F16;
  o.page_tokens = P;
  o.rollback_margin_tokens = M;
  o.max_tokens = n;
  eg::KVCache kv(cfg, o);
  const int bound = (W + M - 1 + P - 1) / P + 1;  // ceil((W + M - 1) / P) + 1 pages
  while (kv.n_past() < n) {
    advance(kv, std::min(n - kv.n_past(), 1 + static_cast<int>(rng() % 100)), rng);
    const int full_pages = (kv.n_past() + P - 1) / P;
    ASSERT_LE(kv.pages_reserved(), 5 * bound + full_pages);
    ASSERT_GE(kv.pages_in_use(), full_pages);
  }
  EXPECT_EQ(kv.pages_reserved(), 5 * bound + (n + P - 1) / P);
  // The last append started at >= n - P and kept its window + margin, from a page start on.
  EXPECT_GE(kv.first_live_position(0), n - P - W + 1 - M - (P - 1));
  EXPECT_EQ(kv.first_live_position(5), 0);
}

TEST(KVCache, TruncateKeepsExactlyWhatReprefillNeeds) {
  std::mt19937 rng(4);
  const int W = 20, P = 8, M = 16;
  const eg::ModelConfig cfg = synthetic(3, 3, W, 16, 0);  // sliding, sliding, full
  eg::KVCacheOptions o;
  o.page_tokens = P;
  o.rollback_margin_tokens = M;
  o.max_tokens = 400;
  for (int n_past : {5, 8, 100, 203}) {
    for (int n = 0; n <= n_past; ++n) {
      eg::KVCache kv(cfg, o);
      advance(kv, n_past, rng, 13);
      const int first_live = kv.first_live_position(0);
      const int in_use_before = static_cast<int>(kv.pages_in_use());
      const int kept = kv.truncate(n);
      // Expected independently: n survives iff the window of a query at n is still stored.
      const bool ok = n == 0 || std::max(0, n - W + 1) >= first_live;
      ASSERT_EQ(kept, ok ? n : 0) << n_past << " -> " << n;
      if (n >= n_past - M) ASSERT_EQ(kept, n) << "within the rollback margin";
      ASSERT_EQ(kv.n_past(), kept);
      ASSERT_LE(kv.pages_in_use(), in_use_before);
      if (kept == 0) ASSERT_EQ(kv.pages_in_use(), 0);
      // The full layer holds exactly the pages of positions 0..kept-1.
      ASSERT_EQ(kv.view(2).n_pages, (kept + P - 1) / P);
      advance(kv, n_past - kept, rng, 13);  // appending from the kept position works
      ASSERT_EQ(kv.n_past(), n_past);
    }
  }
  eg::KVCache kv(cfg, o);
  advance(kv, 50, rng);
  EXPECT_EQ(kv.truncate(60), 50);  // clamped
  EXPECT_EQ(kv.truncate(-3), 0);
  EXPECT_THROW(kv.begin_append(1, 1), eg::Error);   // not at n_past
  EXPECT_THROW(kv.begin_append(0, 9), eg::Error);   // crosses a page
  EXPECT_THROW(kv.begin_append(0, 0), eg::Error);
  eg::KVCacheOptions small = o;
  small.max_tokens = 4;
  eg::KVCache full(cfg, small);
  EXPECT_THROW(full.begin_append(0, 5), eg::Error);  // context full
  EXPECT_THROW(kv.write(0, 0, 1, nullptr, nullptr), eg::Error);  // not prepared
}

TEST(KVCache, BadOptionsAreErrors) {
  const eg::ModelConfig cfg = synthetic(2, 2, 8, 16, 0);
  eg::KVCacheOptions o;
  o.max_tokens = 0;
  EXPECT_THROW(eg::KVCache(cfg, o), eg::Error);
  o.max_tokens = 10;
  o.page_tokens = 0;
  EXPECT_THROW(eg::KVCache(cfg, o), eg::Error);
  o.page_tokens = 16;
  o.rollback_margin_tokens = 15;
  EXPECT_THROW(eg::KVCache(cfg, o), eg::Error);
  EXPECT_THROW(eg::parse_kv_type("fp8"), eg::Error);
  EXPECT_EQ(eg::parse_kv_type("INT8"), eg::KVType::INT8);
  EXPECT_EQ(eg::parse_kv_type("bf16"), eg::KVType::BF16);
}

// ---- with a model -----------------------------------------------------------------------------

std::string fixture(const std::string& name) { return egtest::source_dir() + "/tests/fixtures/" + name; }

std::vector<int32_t> random_ids(int n, int vocab, std::mt19937& rng) {
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = 3 + static_cast<int32_t>(rng() % (vocab - 3));
  ids[0] = 2;
  return ids;
}

// Prefill of ids[from..to) in random chunks; returns the logits of every position (All).
std::vector<float> prefill(const eg::Model& m, eg::KVCache& kv, const std::vector<int32_t>& ids, int from, int to,
                           std::mt19937& rng) {
  eg::ForwardScratch s;
  std::vector<float> all, logits;
  for (int p = from; p < to;) {
    const int T = std::min(to - p, 1 + static_cast<int>(rng() % 23));
    m.forward(ids.data() + p, T, kv, s, eg::LogitsMode::All, logits);
    all.insert(all.end(), logits.begin(), logits.end());
    p += T;
  }
  return all;
}

TEST(KVCacheModel, KVSharedLayersAllocateNothing) {
  auto m = eg::Model::load_dir(fixture("gemma4-random-flat"));
  const auto& cfg = m->config();
  eg::KVCacheOptions o;
  o.page_tokens = 4;
  o.max_tokens = 80;
  eg::KVCache kv(cfg, o);
  std::mt19937 rng(5);
  prefill(*m, kv, random_ids(80, cfg.vocab_size, rng), 0, 80, rng);
  int shared = 0;
  size_t own = 0;
  for (int i = 0; i < cfg.n_layers; ++i) {
    if (cfg.layers[i].kv_source >= 0) {
      ++shared;
      EXPECT_EQ(kv.page_bytes(i), 0u);
      EXPECT_EQ(kv.bytes_per_token(i), 0u);
      EXPECT_EQ(kv.view(i).pages, kv.view(cfg.layers[i].kv_source).pages);
    } else {
      own += kv.page_bytes(i);
    }
  }
  EXPECT_EQ(shared, 2);
  EXPECT_EQ(kv.bytes_reserved(), eg::kv_bytes_for_context(cfg, 80, o));
  EXPECT_EQ(kv.bytes_reserved(), expected_bytes(cfg, 80, o));
  EXPECT_GT(own, 0u);
}

// Logits do not depend on the page size (F32 KV: bit-identical; F16: also, since the stored
// values are the same) nor on the batching.
TEST(KVCacheModel, LogitsIndependentOfPageSize) {
  auto m = eg::Model::load_dir(fixture("gemma4-random-flat"));
  std::mt19937 rng(6);
  const auto ids = random_ids(80, m->config().vocab_size, rng);
  for (eg::KVType t : {eg::KVType::F32, eg::KVType::F16}) {
    std::vector<float> first;
    for (int P : {1, 3, 16, 128}) {
      eg::KVCacheOptions o;
      o.type = t;
      o.page_tokens = P;
      o.max_tokens = 80;
      eg::KVCache kv(m->config(), o);
      const auto all = prefill(*m, kv, ids, 0, 80, rng);
      if (first.empty()) first = all;
      ASSERT_EQ(all, first) << eg::kv_type_name(t) << " page " << P;
    }
  }
  // The compatibility constructor is the F32 cache.
  eg::KVCache compat(m->config(), 80);
  EXPECT_EQ(compat.type(), eg::KVType::F32);
}

// Truncate across page and window boundaries and deeper than the margin, then re-prefill from the
// returned position: the logits equal those of one uninterrupted run.
TEST(KVCacheModel, TruncateThenReprefillEqualsFreshPrefill) {
  auto m = eg::Model::load_dir(fixture("gemma4-random-flat"));  // window 16, KV sharing
  const auto& cfg = m->config();
  const int V = cfg.vocab_size, N = 80, P = 4, M = 8;
  std::mt19937 rng(7);
  const auto ids = random_ids(N, V, rng);
  for (eg::KVType t : {eg::KVType::F32, eg::KVType::F16, eg::KVType::INT8}) {
    std::vector<int> cuts = {79, 72, 63, 48, 16, 15, 0};  // page / window boundaries, margin, deep
    if (t == eg::KVType::INT8) cuts = {75, 40};
    eg::KVCacheOptions o;
    o.type = t;
    o.page_tokens = P;
    o.rollback_margin_tokens = M;
    o.max_tokens = N;
    eg::KVCache fresh(cfg, o);
    const auto want = prefill(*m, fresh, ids, 0, N, rng);
    int deep = 0;
    for (int n : cuts) {
      eg::KVCache kv(cfg, o);
      prefill(*m, kv, ids, 0, N, rng);
      const int kept = kv.truncate(n);
      if (n >= N - M) EXPECT_EQ(kept, n) << "within the margin";
      EXPECT_TRUE(kept == n || kept == 0) << n << " -> " << kept;
      deep += kept != n;
      const auto got = prefill(*m, kv, ids, kept, N, rng);
      ASSERT_EQ(got.size(), static_cast<size_t>(N - kept) * V);
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], want[static_cast<size_t>(kept) * V + i]) << eg::kv_type_name(t) << " n " << n;
    }
    EXPECT_GT(deep, 0) << "some truncations went past the recycled pages";
  }
}

TEST(KVCacheModel, SaveLoadRoundTripIsBitIdentical) {
  auto m = eg::Model::load_dir(fixture("gemma4-random-flat"));
  const auto& cfg = m->config();
  std::mt19937 rng(8);
  const auto ids = random_ids(80, cfg.vocab_size, rng);
  for (eg::KVType t : {eg::KVType::F32, eg::KVType::F16, eg::KVType::BF16, eg::KVType::INT8}) {
    eg::KVCacheOptions o;
    o.type = t;
    o.page_tokens = 8;
    o.max_tokens = 80;
    eg::KVCache kv(cfg, o);
    prefill(*m, kv, ids, 0, 61, rng);
    std::stringstream ss;
    kv.save(ss);
    const std::string bytes = ss.str();
    eg::KVCache back = eg::KVCache::load(ss, cfg);
    EXPECT_EQ(back.n_past(), 61);
    EXPECT_EQ(back.type(), t);
    EXPECT_EQ(back.bytes_in_use(), kv.bytes_in_use());
    std::stringstream again;
    back.save(again);
    EXPECT_EQ(again.str(), bytes);
    const auto a = prefill(*m, kv, ids, 61, 80, rng);
    const auto b = prefill(*m, back, ids, 61, 80, rng);
    EXPECT_EQ(a, b) << eg::kv_type_name(t);

    // Truncated anywhere: a clear error.
    for (size_t cut = 0; cut < bytes.size(); cut += 1 + bytes.size() / 97) {
      std::stringstream part(bytes.substr(0, cut));
      EXPECT_THROW(eg::KVCache::load(part, cfg), eg::Error) << cut;
    }
    std::string bad = bytes;
    bad[0] = 'X';
    std::stringstream bs(bad);
    EXPECT_THROW(eg::KVCache::load(bs, cfg), eg::Error);
  }
  // Another model's cache.
  auto other = eg::Model::load_dir(fixture("gemma3-random"));
  eg::KVCache kv(cfg, 80);
  prefill(*m, kv, ids, 0, 10, rng);
  std::stringstream ss;
  kv.save(ss);
  EXPECT_THROW(eg::KVCache::load(ss, other->config()), eg::Error);
}

// With the default F16 KV, the tiny models still give transformers' first 16 greedy ids for
// every reference prompt (one of 507 tokens, past the 128-token window).
class TinyModelsF16 : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyModelsF16, DefaultF16KVGivesReferenceGreedyIds) {
  const std::string dir = egtest::shared_dir() + "/models/" + GetParam();
  auto m = eg::Model::load_dir(dir);
  const auto ref = nlohmann::json::parse(egtest::read_file(dir + "/reference.json"));
  ASSERT_GE(ref["prompts"].size(), 8u);
  for (const auto& p : ref["prompts"]) {
    const auto ids = p["input_ids"].get<std::vector<int32_t>>();
    auto want = p["greedy_new_ids"].get<std::vector<int32_t>>();
    want.resize(16);
    eg::KVCacheOptions o;  // F16, 128-token pages
    ASSERT_EQ(o.type, eg::KVType::F16);
    o.max_tokens = static_cast<int>(ids.size()) + 16;
    eg::KVCache kv(m->config(), o);
    eg::ForwardScratch s;
    std::vector<float> logits;
    m->forward(ids.data(), static_cast<int>(ids.size()), kv, s, eg::LogitsMode::Last, logits);
    std::vector<int32_t> got;
    for (int i = 0; i < 16; ++i) {
      const int32_t next = eg::argmax(logits.data(), m->config().vocab_size);
      got.push_back(next);
      if (i + 1 < 16) m->forward(&next, 1, kv, s, eg::LogitsMode::Last, logits);
    }
    EXPECT_EQ(got, want) << GetParam() << " " << p["id"].get<std::string>();
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, TinyModelsF16, ::testing::Values("tiny-gemma3", "tiny-gemma2", "tiny-gemma4"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
