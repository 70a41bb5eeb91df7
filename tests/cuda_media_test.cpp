// Media embeddings on the CUDA executor (prefill_media; label "cuda"; skips without a GPU or the
// tiny GGUFs): rows of images' / audio's soft tokens replace token embeddings, bidirectional spans
// see keys to their end (attention_prefill's key_end), Gemma 4's PLE uses the pad row for them.
// Reference: the CPU executor's prefill_media (Model::forward with EmbedSpans, tested against
// transformers on the multimodal fixtures) on the same random rows. Bounds (of each row's logit
// range): every row as a distribution (median ≤ 1.5e-2, worst ≤ 5e-2, greedy ids
// equal unless a near-tie at that margin), the last row and the decode steps ≤ 1.5e-2; and where
// a span is bidirectional, its first row must differ from the CPU's causal-mask result by ≥ 0.1
// while the GPU's error there is ≤ a fifth of that (so the test sees the mask). Also with chunks
// of 8 tokens (EG_CUDA_PREFILL_CHUNK), which a 12-row bidirectional span must not be cut by.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "core/error.h"
#include "cuda_compare.h"
#include "cuda_test_util.h"
#include "exec/executor.h"
#include "model/model.h"

#ifndef EG_SHARED_DIR
#define EG_SHARED_DIR ""
#endif

namespace eg {
namespace {

// The last row of a call and the decode steps: the executor tests' bound. Every row: a
// distribution statement as the GEMM prefill's (cuda_prefill_test.cpp: the GEMM path rounds
// activations to 16 bits, the CPU's int8 per 32-block). Measured on the H200 (2026-12-03), per
// call: medians 7.1e-3–1.11e-2 (tiny-gemma3 1.05e-2 / 1.11e-2 with bidirectional / causal spans
// alike, so the mask is not the cause), worst rows 9.4e-3–1.82e-2, last rows ≤ 1.09e-2; on the
// spans' first rows the GPU's error 6.3e-3–1.08e-2 against a CPU bidirectional-vs-causal
// difference of 0.10–0.37.
constexpr float kBound = cudatest::kLogitBound;
constexpr float kRowsMedian = cudatest::kLogitBound, kRowsWorst = 5e-2f;

void check_media(const std::string& name, const std::string& file, bool bidirectional) {
  const std::string path = cudatest::find_gguf(EG_SHARED_DIR, name, file);
  if (path.empty()) GTEST_SKIP() << file << " not found";
  auto model = Model::load_gguf(path);
  auto cpu = make_cpu_executor(*model);
  auto gpu = make_executor(*model, parse_device("cuda"));
  const int64_t V = model->config().vocab_size, H = model->config().hidden_size;
  // 30 tokens: a 12-row span at 4..15 (bidirectional or not), a causal 5-row span at 20..24.
  std::vector<int32_t> ids(30);
  for (int t = 0; t < 30; ++t) ids[t] = static_cast<int32_t>((2 + 97 * t) % V);
  const std::vector<float> a = cudatest::random_vec(static_cast<size_t>(12 * H), 31), b = cudatest::random_vec(static_cast<size_t>(5 * H), 32);
  const std::vector<EmbedSpan> spans = {{4, 12, a.data(), bidirectional}, {20, 5, b.data(), false}};
  KVCacheOptions ko;
  ko.max_tokens = 64;
  auto kc = cpu->new_kv_cache(ko), kg = gpu->new_kv_cache(ko);
  auto wc = cpu->new_workspace(), wg = gpu->new_workspace();
  std::vector<float> lc, lg;
  // The prompt in two calls (10 tokens, then 20 with the spans shifted), as a session appends.
  cpu->prefill(ids.data(), 10, *kc, *wc, LogitsMode::None, lc);
  gpu->prefill(ids.data(), 10, *kg, *wg, LogitsMode::None, lg);
  std::vector<float> a2 = cudatest::random_vec(static_cast<size_t>(12 * H), 33);
  const std::vector<EmbedSpan> later = {{0, 12, a2.data(), bidirectional}, {14, 5, b.data(), false}};
  const std::vector<EmbedSpan>* parts[2] = {&spans, &later};
  const int begin[2] = {0, 10}, len[2] = {30, 20};
  for (int call = 0; call < 2; ++call) {
    if (call == 0) {  // the first call on fresh caches: all 30 tokens
      kc = cpu->new_kv_cache(ko);
      kg = gpu->new_kv_cache(ko);
    }
    // The CPU with the spans' flag flipped to causal: how much the bidirectional mask matters.
    std::vector<EmbedSpan> causal = *parts[call];
    for (EmbedSpan& m : causal) m.bidirectional = false;
    std::vector<float> lcausal;
    {
      auto kx = cpu->new_kv_cache(ko);
      auto wx = cpu->new_workspace();
      std::vector<float> tmp;
      if (call == 1) cpu->prefill(ids.data(), 10, *kx, *wx, LogitsMode::None, tmp);
      cpu->prefill_media(ids.data() + begin[call], len[call], causal, *kx, *wx, LogitsMode::All, lcausal);
    }
    cpu->prefill_media(ids.data() + begin[call], len[call], *parts[call], *kc, *wc, LogitsMode::All, lc);
    gpu->prefill_media(ids.data() + begin[call], len[call], *parts[call], *kg, *wg, LogitsMode::All, lg);
    ASSERT_EQ(lc.size(), lg.size());
    std::vector<float> errs;
    for (int t = 0; t < len[call]; ++t) {
      const float* r = lc.data() + static_cast<size_t>(t) * V;
      const float* g = lg.data() + static_cast<size_t>(t) * V;
      errs.push_back(cudatest::rel_range_err(r, g, V));
      EXPECT_TRUE(cudatest::same_greedy_or_near_tie(r, g, V, kRowsWorst)) << file << " call " << call << " row " << t;
    }
    const int first = (*parts[call])[0].begin;  // the first row of the (maybe bidirectional) span
    const float flag = cudatest::rel_range_err(lc.data() + static_cast<size_t>(first) * V,
                                               lcausal.data() + static_cast<size_t>(first) * V, V);
    std::vector<float> sorted = errs;
    std::sort(sorted.begin(), sorted.end());
    std::printf("%s %s call %d: %zu rows vs cpu: median %.2e, worst %.2e, last %.2e; span row %d: gpu %.2e, "
                "cpu bidirectional vs causal %.2e\n", file.c_str(), bidirectional ? "bidirectional" : "causal", call,
                errs.size(), sorted[sorted.size() / 2], sorted.back(), errs.back(), first, errs[first], flag);
    EXPECT_LE(sorted[sorted.size() / 2], kRowsMedian) << file << " call " << call;
    EXPECT_LE(sorted.back(), kRowsWorst) << file << " call " << call;
    EXPECT_LE(errs.back(), kBound) << file << " call " << call << ": the last row";
    if (bidirectional) {  // the mask matters on this row, and the GPU follows it
      EXPECT_GE(flag, 0.1f) << file << " call " << call;
      EXPECT_LE(errs[first], flag / 5) << file << " call " << call;
    }
    if (call == 0) {  // the second call appends to a 10-token text prefix
      kc = cpu->new_kv_cache(ko);
      kg = gpu->new_kv_cache(ko);
      cpu->prefill(ids.data(), 10, *kc, *wc, LogitsMode::None, lc);
      gpu->prefill(ids.data(), 10, *kg, *wg, LogitsMode::None, lg);
    }
  }
  // Decode after the media: the caches hold the same K/V.
  int32_t next = argmax_row(lc.data() + static_cast<size_t>(19) * V, V);
  for (int step = 0; step < 6; ++step) {
    cpu->prefill(&next, 1, *kc, *wc, LogitsMode::Last, lc);
    KVCache* kp = kg.get();
    gpu->decode(&next, 1, &kp, *wg, lg);
    ASSERT_LE(cudatest::rel_range_err(lc.data(), lg.data(), V), kBound) << file << " step " << step;
    next = argmax_row(lc.data(), V);
  }
  // Bad spans: the CPU's error, nothing changed.
  const int before = kg->n_past();
  const std::vector<EmbedSpan> bad = {{3, 40, a.data(), false}};
  EXPECT_THROW(gpu->prefill_media(ids.data(), 10, bad, *kg, *wg, LogitsMode::Last, lg), Error);
  EXPECT_EQ(kg->n_past(), before);
}

#define SKIP_WITHOUT_GPU() \
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device"

TEST(CudaMedia, Gemma3SpansMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  check_media("tiny-gemma3", "tiny-gemma3-q8_0.gguf", true);
  check_media("tiny-gemma3", "tiny-gemma3-q8_0.gguf", false);
}
TEST(CudaMedia, Gemma4SpansWithPerLayerEmbeddingsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  check_media("tiny-gemma4", "tiny-gemma4-q8_0.gguf", true);
}
TEST(CudaMedia, Gemma2AndQ6KEmbeddingMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  check_media("tiny-gemma2", "tiny-gemma2-q4_0.gguf", true);
}
// Chunks of 8 tokens: the bidirectional span (rows 4..15) is kept in one chunk.
TEST(CudaMedia, SmallChunksKeepABidirectionalSpanWhole) {
  SKIP_WITHOUT_GPU();
  setenv("EG_CUDA_PREFILL_CHUNK", "8", 1);
  check_media("tiny-gemma3", "tiny-gemma3-q8_0.gguf", true);
  check_media("tiny-gemma4", "tiny-gemma4-q8_0.gguf", true);
  unsetenv("EG_CUDA_PREFILL_CHUNK");
}

}  // namespace
}  // namespace eg
