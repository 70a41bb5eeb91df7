// Host copies of a CUDA KV cache (label "cuda"; skips without a GPU or the tiny GGUFs): save() of
// a GPU cache, restore into a GPU cache (session files), and the prefix cache's page export and
// import (the server's), on the tiny GGUFs (Gemma 2 soft-capping, Gemma 3 sliding layers, Gemma 4
// KV sharing). References: the CPU executor on its own cache (a GPU cache read on the CPU must
// continue as the CPU's own, within the executor tests' bound), and the GPU cache that was never
// copied (a copy and its way back must give the same logits).
#include <gtest/gtest.h>

#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "core/error.h"
#include "cuda_compare.h"
#include "cuda_test_util.h"
#include "engine/loaded_model.h"
#include "engine/session.h"
#include "exec/executor.h"
#include "kv/prefix_cache.h"
#include "model/model.h"

#ifndef EG_SHARED_DIR
#define EG_SHARED_DIR ""
#endif

namespace eg {
namespace {

constexpr float kBound = cudatest::kLogitBound;  // 1.5e-2 of the row's logit range

std::string tiny(const std::string& model) {
  for (const char* q : {"q8_0", "q4_0"}) {
    const std::string p = cudatest::find_gguf(EG_SHARED_DIR, model, model + "-" + q + ".gguf");
    if (!p.empty()) return p;
  }
  return "";
}

std::vector<int32_t> prompt_ids(int n, int64_t V) {
  std::vector<int32_t> ids = {2};
  for (int i = 1; i < n; ++i) ids.push_back(static_cast<int32_t>((1009 * i + 77) % V));
  return ids;
}

// A fresh temporary directory (the CUDA tests link no test library).
std::string temp_dir() {
  std::string t = (std::filesystem::temp_directory_path() / "eg-cuda-kv-XXXXXX").string();
  if (!::mkdtemp(t.data())) throw Error("mkdtemp failed");
  return t;
}

KVPageRef page_of(const KVCache& kv, int layer, int page) { return {kv.page_data(layer, page), kv.layer_type(layer)}; }

class CudaKvIo : public ::testing::TestWithParam<std::string> {};

// A GPU cache saved, then read on the CPU (continues as the CPU's own cache) and restored into a
// fresh GPU cache (continues exactly as the original); the prefix cache stores the GPU cache's
// full pages and loads them into another GPU cache that held other positions.
TEST_P(CudaKvIo, SaveRestoreAndPrefixCacheMatchTheUncopiedCache) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  const std::string path = tiny(GetParam());
  if (path.empty()) GTEST_SKIP() << GetParam() << " GGUF not found";
  auto model = Model::load_gguf(path);
  auto cpu = make_cpu_executor(*model);
  auto gpu = make_executor(*model, parse_device("cuda"));
  ASSERT_EQ(gpu->device(), Device::CUDA);
  const ModelConfig& cfg = model->config();
  const int64_t V = cfg.vocab_size;
  KVCacheOptions ko;
  ko.max_tokens = 160;
  ko.page_tokens = 16;
  const int n = 70;  // > 4 pages, the last one partly filled
  const std::vector<int32_t> ids = prompt_ids(n, V);
  const int32_t next = ids[5];

  auto kg = gpu->new_kv_cache(ko), kc = cpu->new_kv_cache(ko);
  auto wg = gpu->new_workspace(), wc = cpu->new_workspace();
  std::vector<float> lg, lc, lx;
  gpu->prefill(ids.data(), n, *kg, *wg, LogitsMode::None, lg);
  cpu->prefill(ids.data(), n, *kc, *wc, LogitsMode::None, lc);

  // save() copies the device's pages: read on the CPU, the next step is the CPU's own.
  std::stringstream ss;
  kg->save(ss);
  KVCache host = KVCache::load(ss, cfg);
  ASSERT_EQ(host.n_past(), n);
  {
    auto hc = cpu->new_kv_cache(ko);
    hc->import_pages(n, [&](int l, int j) { return page_of(host, l, j); });
    auto kc2 = cpu->new_kv_cache(ko);
    kc2->import_pages(n, [&](int l, int j) { return page_of(*kc, l, j); });
    cpu->prefill(&next, 1, *hc, *wc, LogitsMode::Last, lx);
    cpu->prefill(&next, 1, *kc2, *wc, LogitsMode::Last, lc);
    const float e = cudatest::rel_range_err(lc.data(), lx.data(), V);
    std::printf("%s: the CPU on the GPU's saved cache vs its own: %.2e of the logit range\n", GetParam().c_str(), e);
    EXPECT_LE(e, kBound);
    EXPECT_TRUE(cudatest::same_greedy_or_near_tie(lc.data(), lx.data(), V, kBound));
  }

  // The reference: the original GPU cache's next step.
  std::vector<float> want;
  {
    auto k0 = gpu->new_kv_cache(ko);
    auto w0 = gpu->new_workspace();
    gpu->prefill(ids.data(), n, *k0, *w0, LogitsMode::None, lg);
    gpu->prefill(&next, 1, *k0, *w0, LogitsMode::Last, want);
  }

  // Restored into a fresh GPU cache (what Session::restore does): the same logits.
  {
    auto kr = gpu->new_kv_cache(ko);
    auto wr = gpu->new_workspace();
    kr->import_pages(n, [&](int l, int j) { return page_of(host, l, j); });
    gpu->prefill(&next, 1, *kr, *wr, LogitsMode::Last, lx);
    EXPECT_LE(cudatest::rel_range_err(want.data(), lx.data(), V), 1e-5f) << "restored GPU cache";
  }

  // The prefix cache: the GPU cache's 4 full pages stored, then loaded into a GPU cache that held
  // another sequence; the rest of the prompt prefilled there gives the original's next step.
  PrefixCache pc(cfg, ko, size_t{256} << 20);
  pc.insert(ids, *kg);
  EXPECT_EQ(pc.blocks(), n / ko.page_tokens);
  {
    auto kp = gpu->new_kv_cache(ko);
    auto wp = gpu->new_workspace();
    std::vector<int32_t> other = prompt_ids(90, V);
    for (auto& t : other) t = static_cast<int32_t>((t * 7 + 3) % V);
    other[0] = 2;
    gpu->prefill(other.data(), 90, *kp, *wp, LogitsMode::None, lg);
    const int L = pc.load_longest_prefix(ids, *kp);
    ASSERT_EQ(L, 64);
    ASSERT_EQ(kp->n_past(), 64);
    gpu->prefill(ids.data() + L, n - L, *kp, *wp, LogitsMode::None, lg);
    gpu->prefill(&next, 1, *kp, *wp, LogitsMode::Last, lx);
    const float e = cudatest::rel_range_err(want.data(), lx.data(), V);
    std::printf("%s: prefix-cache pages into a used GPU cache vs the original: %.2e\n", GetParam().c_str(), e);
    EXPECT_LE(e, kBound);
    EXPECT_TRUE(cudatest::same_greedy_or_near_tie(want.data(), lx.data(), V, kBound));
  }
}

INSTANTIATE_TEST_SUITE_P(TinyGgufs, CudaKvIo, ::testing::Values("tiny-gemma2", "tiny-gemma3", "tiny-gemma4"));

// Session files with --device cuda: a GPU session saved and restored into another GPU session
// continues with the same ids as the uninterrupted one (greedy and sampled with a seed), reusing
// the restored cache; a CPU session reads the same file; an int8 file cannot go on the GPU.
TEST(CudaKvIoSession, SaveRestoreContinuesAsTheUninterruptedSession) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  const std::string path = tiny("tiny-gemma3");
  if (path.empty()) GTEST_SKIP() << "tiny-gemma3 GGUF not found";
  std::shared_ptr<const LoadedModel> lg = LoadedModel::load(path, parse_device("cuda"));
  ASSERT_EQ(lg->executor().device(), Device::CUDA);
  const std::string dir = temp_dir();
  for (float temperature : {0.0f, 0.9f}) {
    SessionOptions o;
    o.context_tokens = 256;
    o.kv.page_tokens = 16;
    o.sampling.temperature = temperature;
    o.sampling.seed = 99;
    o.ignore_eos = true;
    GenerateParams g;
    g.max_new_tokens = 12;
    Session a(lg, o);
    a.chat("Tell me about the sea and the ships on it.", g);
    const std::string file = dir + "/gpu.egsession";
    a.save(file);
    const TurnResult want = a.chat("And the night?", g);

    SessionOptions other;
    other.context_tokens = 64;
    Session b(lg, other);
    b.restore(file);
    EXPECT_EQ(b.context_size(), 256);
    const TurnResult got = b.chat("And the night?", g);
    EXPECT_EQ(got.ids, want.ids) << "temperature " << temperature;
    EXPECT_EQ(got.stats.reused_tokens, want.stats.reused_tokens) << "the KV cache was restored, not recomputed";
    EXPECT_GT(got.stats.reused_tokens, 16);
  }
  // The CPU reads a GPU session's file (and generates from it).
  std::shared_ptr<const LoadedModel> lc = LoadedModel::load(path, parse_device("cpu"));
  {
    Session c(lc, SessionOptions{});
    c.restore(dir + "/gpu.egsession");
    GenerateParams g;
    g.max_new_tokens = 4;
    EXPECT_GT(c.chat("And the night?", g).stats.reused_tokens, 16);
  }
  // An int8 KV cache saved on the CPU: refused on the GPU with a clear error, the session unchanged.
  SessionOptions o8;
  o8.context_tokens = 128;
  o8.kv.type = KVType::INT8;
  Session c8(lc, o8);
  GenerateParams g4;
  g4.max_new_tokens = 4;
  c8.chat("Hello.", g4);
  c8.save(dir + "/int8.egsession");
  Session b8(lg, SessionOptions{});
  b8.chat("Hi.", g4);
  const int ctx = b8.context_size();
  try {
    b8.restore(dir + "/int8.egsession");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("int8"), std::string::npos) << e.what();
  }
  EXPECT_EQ(b8.context_size(), ctx);
  EXPECT_GT(b8.chat("Again?", g4).stats.reused_tokens, 0) << "the session kept its cache";
}

}  // namespace
}  // namespace eg
