// Model::forward_batch (one decode step for B independent sequences) against the reference:
// each sequence run alone with Model::forward. Every row's logits must be bit-identical (memcmp),
// for the four tiny models (Gemma 2 softcaps, Gemma 3 sliding windows, Gemma 4 PLE + KV sharing,
// Gemma 4 MoE + K=V), quantized GGUFs, and F16 / F32 / INT8 KV caches with small pages, with
// prompts of different lengths (page boundaries crossed during the steps, sliding pages recycled).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/model.h"
#include "test_util.h"

namespace {

std::string shared_model(const std::string& rel) { return egtest::shared_dir() + "/models/" + rel; }

std::unique_ptr<eg::Model> load(const std::string& rel) {
  const std::string p = shared_model(rel);
  return rel.size() > 5 && rel.substr(rel.size() - 5) == ".gguf" ? eg::Model::load_gguf(p) : eg::Model::load_dir(p);
}

int vocab_limit(const eg::ModelConfig& c) {
  return c.ple_dim > 0 ? std::min(c.vocab_size, c.ple_vocab) : c.vocab_size;
}

std::vector<int32_t> random_ids(std::mt19937& rng, int n, int vocab) {
  std::uniform_int_distribution<int32_t> d(1, vocab - 1);
  std::vector<int32_t> v(n);
  for (auto& t : v) t = d(rng);
  return v;
}

eg::KVCacheOptions kv_options(eg::KVType t, int page, int max_tokens) {
  eg::KVCacheOptions o;
  o.type = t;
  o.page_tokens = page;
  o.max_tokens = max_tokens;
  return o;
}

// Eight sequences with prompts of different lengths, each prefilled into a reference cache and a
// batch cache. Then, for each B in `batch_sizes`, `steps` decode steps with random tokens:
// forward_batch over sequences 0..B-1 versus forward of each of them alone (the other sequences
// wait). Returns the number of rows compared.
int check_batch(const eg::Model& m, const std::vector<int>& batch_sizes, const std::vector<eg::KVCacheOptions>& opts,
                int steps, uint32_t seed, const std::string& what) {
  std::mt19937 rng(seed);
  const int V = vocab_limit(m.config());
  const int n_seq = *std::max_element(batch_sizes.begin(), batch_sizes.end());
  std::vector<eg::KVCache> ref, bat;
  eg::ForwardScratch s_ref, s_bat;
  std::vector<float> lr, lb;
  for (int b = 0; b < n_seq; ++b) {
    const eg::KVCacheOptions& o = opts[b % opts.size()];
    ref.emplace_back(m.config(), o);
    bat.emplace_back(m.config(), o);
    // 14, 45, 76, ... 231 tokens: with 16-token pages the steps cross page boundaries at
    // different points, and the longer prompts pass the 128-token sliding window (recycling).
    const int len = 14 + 31 * ((b * 3 + static_cast<int>(seed)) % 8);
    const auto prompt = random_ids(rng, len, V);
    m.forward(prompt.data(), len, ref[b], s_ref, eg::LogitsMode::None, lr);
    m.forward(prompt.data(), len, bat[b], s_bat, eg::LogitsMode::None, lb);
  }
  std::vector<eg::KVCache*> ptrs;
  for (auto& k : bat) ptrs.push_back(&k);
  int rows = 0;
  const size_t V_all = static_cast<size_t>(m.config().vocab_size);
  for (int B : batch_sizes) {
    for (int step = 0; step < steps; ++step) {
      const auto toks = random_ids(rng, B, V);
      m.forward_batch(toks.data(), B, ptrs.data(), s_bat, lb);
      EXPECT_EQ(lb.size(), static_cast<size_t>(B) * V_all);
      for (int b = 0; b < B; ++b) {
        m.forward(&toks[b], 1, ref[b], s_ref, eg::LogitsMode::Last, lr);
        if (lr.size() != V_all || lb.size() < (b + 1) * V_all) {
          ADD_FAILURE() << what << ": logits size";
          return rows;
        }
        EXPECT_EQ(bat[b].n_past(), ref[b].n_past());
        EXPECT_EQ(bat[b].pages_in_use(), ref[b].pages_in_use()) << what << " row " << b << " step " << step;
        EXPECT_EQ(std::memcmp(lb.data() + b * V_all, lr.data(), V_all * sizeof(float)), 0)
            << what << ": B=" << B << " row " << b << " step " << step << " pos " << ref[b].n_past() - 1;
        ++rows;
      }
    }
  }
  return rows;
}

class ForwardBatch : public ::testing::TestWithParam<std::string> {};

TEST_P(ForwardBatch, RowsBitIdenticalToSingleSequenceForward) {
  auto m = load(GetParam());
  for (eg::KVType t : {eg::KVType::F16, eg::KVType::F32, eg::KVType::INT8}) {
    const std::vector<eg::KVCacheOptions> opts = {kv_options(t, 16, 512)};
    const int rows = check_batch(*m, {1, 2, 3, 4, 5, 6, 7, 8, 5, 2}, opts, 3, 100, GetParam() + "/" + eg::kv_type_name(t));
    EXPECT_EQ(rows, 3 * (36 + 7));
  }
}

// Different page sizes and KV types in one batch (each row its own cache geometry).
TEST_P(ForwardBatch, MixedCacheGeometriesInOneBatch) {
  auto m = load(GetParam());
  const std::vector<eg::KVCacheOptions> opts = {kv_options(eg::KVType::F16, 16, 400),
                                                kv_options(eg::KVType::F32, 128, 400),
                                                kv_options(eg::KVType::INT8, 32, 300),
                                                kv_options(eg::KVType::BF16, 16, 300)};
  check_batch(*m, {7}, opts, 20, 7, GetParam() + "/mixed");
}

INSTANTIATE_TEST_SUITE_P(TinyModels, ForwardBatch,
                         ::testing::Values("tiny-gemma2", "tiny-gemma3", "tiny-gemma4", "tiny-gemma4-moe",
                                           "gguf/tiny-gemma3/tiny-gemma3-q4_0.gguf",
                                           "gguf/tiny-gemma4/tiny-gemma4-q4_k_m.gguf",
                                           "gguf/tiny-gemma2/tiny-gemma2-q8_0.gguf"),
                         [](const auto& info) {
                           std::string n = info.param;
                           const auto slash = n.rfind('/');
                           if (slash != std::string::npos) n = n.substr(slash + 1);
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

// Snapshot of a cache's observable state (positions and the bytes of every live page).
std::vector<uint8_t> snapshot(const eg::KVCache& kv) {
  std::vector<uint8_t> out;
  const int P = kv.options().page_tokens;
  for (int l = 0; l < kv.n_layers(); ++l)
    for (int j = 0; j <= kv.n_past() / P; ++j)
      if (const uint8_t* p = kv.page_data(l, j)) out.insert(out.end(), p, p + kv.page_bytes(l));
  const int n = kv.n_past();
  out.insert(out.end(), reinterpret_cast<const uint8_t*>(&n), reinterpret_cast<const uint8_t*>(&n) + sizeof n);
  return out;
}

class ForwardBatchErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    m = eg::Model::load_dir(shared_model("tiny-gemma3"));
    std::mt19937 rng(3);
    const int caps[3] = {100, 40, 100};  // the middle cache gets full
    for (int b = 0; b < 3; ++b) {
      kvs.emplace_back(m->config(), kv_options(eg::KVType::F16, 16, caps[b]));
      const auto p = random_ids(rng, b == 1 ? 40 : 20 + b, 8000);
      m->forward(p.data(), static_cast<int>(p.size()), kvs[b], s, eg::LogitsMode::None, logits);
    }
    for (auto& k : kvs) ptrs.push_back(&k);
  }
  void expect_unchanged(const std::vector<std::vector<uint8_t>>& before) {
    for (size_t b = 0; b < kvs.size(); ++b) EXPECT_EQ(snapshot(kvs[b]), before[b]) << "cache " << b << " changed";
  }
  std::vector<std::vector<uint8_t>> snap() {
    std::vector<std::vector<uint8_t>> v;
    for (auto& k : kvs) v.push_back(snapshot(k));
    return v;
  }
  std::unique_ptr<eg::Model> m;
  std::vector<eg::KVCache> kvs;
  std::vector<eg::KVCache*> ptrs;
  eg::ForwardScratch s;
  std::vector<float> logits;
};

TEST_F(ForwardBatchErrors, FullCacheThrowsBeforeChangingAnyCache) {
  const auto before = snap();
  const int32_t toks[3] = {5, 6, 7};
  try {
    m->forward_batch(toks, 3, ptrs.data(), s, logits);
    FAIL() << "no error for a full cache";
  } catch (const eg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("sequence 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("context full"), std::string::npos) << e.what();
  }
  expect_unchanged(before);
  // Without the full row the others still step exactly like forward() alone.
  eg::KVCache* rest[2] = {&kvs[0], &kvs[2]};
  const int32_t t2[2] = {5, 7};
  m->forward_batch(t2, 2, rest, s, logits);
  EXPECT_EQ(kvs[0].n_past(), 21);
  EXPECT_EQ(kvs[2].n_past(), 23);
}

TEST_F(ForwardBatchErrors, BadInputsThrowBeforeChangingAnyCache) {
  const auto before = snap();
  eg::KVCache* pair[2] = {&kvs[0], &kvs[2]};
  const int32_t bad_id[2] = {5, 8192};
  EXPECT_THROW(m->forward_batch(bad_id, 2, pair, s, logits), eg::Error);
  const int32_t neg_id[2] = {-1, 5};
  EXPECT_THROW(m->forward_batch(neg_id, 2, pair, s, logits), eg::Error);
  eg::KVCache* dup[2] = {&kvs[0], &kvs[0]};
  const int32_t ok[2] = {5, 6};
  EXPECT_THROW(m->forward_batch(ok, 2, dup, s, logits), eg::Error);
  eg::KVCache* null_row[2] = {&kvs[0], nullptr};
  EXPECT_THROW(m->forward_batch(ok, 2, null_row, s, logits), eg::Error);
  EXPECT_THROW(m->forward_batch(ok, 0, pair, s, logits), eg::Error);
  // A cache made for another model (tiny-gemma2: 4 layers).
  auto g2 = eg::Model::load_dir(shared_model("tiny-gemma2"));
  eg::KVCache other(g2->config(), kv_options(eg::KVType::F16, 16, 64));
  eg::KVCache* mixed[2] = {&kvs[0], &other};
  EXPECT_THROW(m->forward_batch(ok, 2, mixed, s, logits), eg::Error);
  expect_unchanged(before);
  EXPECT_EQ(other.n_past(), 0);
}

}  // namespace
