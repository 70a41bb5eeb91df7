// The persistent decode step (EG_CUDA_STEP=persistent, backend/cuda/step_kernel.h) against the
// graph step (the default) and the CPU executor, on synthetic models made in memory
// (tests/cuda_synth_model.h). Label "cuda"; skips without a GPU.
//
// Both GPU steps run the same stage, quantization and epilogue code; they differ in the matvecs'
// K-split and the attention's split count and CTA size (f32 summation order). With an f32 KV
// cache the two agree to ~1e-7 of the logit range on most rows; with f16/bf16 K/V a last-bit
// difference before the 16-bit rounding moves a key by a rounding unit, and these small random
// models amplify that to ~1e-3 (measured on the H200). So each GPU step is held to the CPU:
// every prompt row median ≤ 5e-3 and worst ≤ 5e-2 of the row's logit range (a distribution
// statement, as cuda_prefill_test.cpp), the last rows and 8 decode steps ≤ 1e-2 (2e-2 where
// stated) with the greedy ids equal. The graph step's numbers are printed next to them. Prompts
// run through the decode step at every position (EG_CUDA_PREFILL=steps), past the window (48).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "cuda_compare.h"
#include "cuda_synth_model.h"
#include "core/error.h"
#include "exec/executor.h"
#include "model/model.h"

namespace eg {
namespace {

struct Env {
  std::vector<std::pair<std::string, std::string>> vars;
  explicit Env(std::vector<std::pair<std::string, std::string>> v) : vars(std::move(v)) {
    for (const auto& [k, x] : vars) setenv(k.c_str(), x.c_str(), 1);
  }
  ~Env() {
    for (const auto& [k, x] : vars) unsetenv(k.c_str());
  }
};

std::unique_ptr<StepExecutor> gpu(const Model& m, const std::string& step,
                                   std::vector<std::pair<std::string, std::string>> extra = {}) {
  extra.emplace_back("EG_CUDA_STEP", step);
  extra.emplace_back("EG_CUDA_PREFILL", "steps");
  Env e(std::move(extra));
  return make_executor(m, parse_device("cuda"));
}

float rel_err(const float* a, const float* b, int64_t n) { return cudatest::rel_range_err(a, b, n); }

std::vector<std::vector<int32_t>> prompts(int64_t V) {
  std::vector<std::vector<int32_t>> ps = {{2, 818, 5279, 529, 7001, 563}, {2, 17, 17, 4, 901, 1234, 4321, 8000, 12, 77}};
  std::vector<int32_t> lng = {2};
  for (int i = 1; i < 90; ++i) lng.push_back((i * 7919 + 13) % 30000);
  ps.push_back(lng);
  for (auto& p : ps)
    for (auto& t : p) t %= static_cast<int32_t>(V);
  return ps;
}

nlohmann::json small(bool gemma2, int head_dim) {
  nlohmann::json o = {{"vocab_size", 4096}, {"hidden_size", 256}, {"intermediate_size", 512},
                      {"num_attention_heads", 4}, {"sliding_window", 48}, {"head_dim", head_dim},
                      {"query_pre_attn_scalar", head_dim}};
  if (gemma2) o.update({{"num_hidden_layers", 4}, {"num_key_value_heads", 2}});
  else o.update({{"num_hidden_layers", 6}, {"num_key_value_heads", 1}});
  return o;
}

// Worst errors over the prompts: every prompt row and 8 decode steps (decode + decode_argmax).
void check(const Model& m, const std::string& name, KVType kt, float cpu_bound, float rows_median = 5e-3f,
           std::vector<std::pair<std::string, std::string>> env = {}) {
  auto cpu = make_cpu_executor(m);
  auto graph = gpu(m, "graph");
  auto pers = gpu(m, "persistent", env);
  ASSERT_NE(pers->description().find("persistent"), std::string::npos) << pers->description();
  ASSERT_EQ(graph->description().find("persistent"), std::string::npos) << graph->description();
  const int64_t V = m.config().vocab_size;
  KVCacheOptions ko;
  ko.type = kt;
  ko.max_tokens = 128;
  std::vector<float> rows_p, rows_g;
  float worst_cpu = 0.0f, worst_cpu_graph = 0.0f;
  int ids_differ = 0, argmax_differ = 0;
  for (const auto& p : prompts(V)) {
    const int T = static_cast<int>(p.size());
    auto kc = cpu->new_kv_cache(ko), kg = graph->new_kv_cache(ko), kp = pers->new_kv_cache(ko), ka = pers->new_kv_cache(ko);
    auto wc = cpu->new_workspace(), wg = graph->new_workspace(), wp = pers->new_workspace();
    std::vector<float> lc, lg, lp, la;
    cpu->prefill(p.data(), T, *kc, *wc, LogitsMode::All, lc);
    graph->prefill(p.data(), T, *kg, *wg, LogitsMode::All, lg);
    pers->prefill(p.data(), T, *kp, *wp, LogitsMode::All, lp);
    pers->prefill(p.data(), T, *ka, *wp, LogitsMode::Last, la);  // a second cache in the same workspace
    ASSERT_EQ(lp.size(), lc.size());
    for (int r = 0; r < T; ++r) {
      const size_t o = static_cast<size_t>(r) * V;
      rows_p.push_back(rel_err(lc.data() + o, lp.data() + o, V));
      rows_g.push_back(rel_err(lc.data() + o, lg.data() + o, V));
    }
    const size_t last = static_cast<size_t>(T - 1) * V;
    worst_cpu = std::max(worst_cpu, rel_err(lc.data() + last, lp.data() + last, V));
    worst_cpu_graph = std::max(worst_cpu_graph, rel_err(lc.data() + last, lg.data() + last, V));
    EXPECT_EQ(argmax_row(lc.data() + last, V), argmax_row(lp.data() + last, V)) << name;
    EXPECT_LE(rel_err(lp.data() + last, la.data(), V), 1e-6f) << name << ": the second cache's last row";
    int32_t next = argmax_row(lc.data() + last, V);
    for (int s = 0; s < 8; ++s) {
      cpu->prefill(&next, 1, *kc, *wc, LogitsMode::Last, lc);
      KVCache* kpp = kp.get();
      pers->decode(&next, 1, &kpp, *wp, lp);
      KVCache* kap = ka.get();
      int32_t got = -1;
      pers->decode_argmax(&next, 1, &kap, *wp, &got);  // alternating caches: the K/V table changes
      KVCache* kgp = kg.get();
      graph->decode(&next, 1, &kgp, *wg, lg);
      worst_cpu = std::max(worst_cpu, rel_err(lc.data(), lp.data(), V));
      worst_cpu_graph = std::max(worst_cpu_graph, rel_err(lc.data(), lg.data(), V));
      const int32_t want = argmax_row(lc.data(), V);
      ids_differ += want != argmax_row(lp.data(), V);
      argmax_differ += got != argmax_row(lp.data(), V);
      next = want;
    }
    EXPECT_EQ(kp->n_past(), T + 8);
    EXPECT_EQ(ka->n_past(), T + 8);
  }
  auto med = [](std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return std::make_pair(v[v.size() / 2], v.back());
  };
  const auto [mp, wp] = med(rows_p);
  const auto [mg, wg] = med(rows_g);
  std::printf("%-40s kv %-4s vs cpu, %zu rows: persistent median %.2e worst %.2e (graph %.2e / %.2e) | last rows + "
              "decode: persistent %.2e (graph %.2e) | ids differ %d, argmax differs %d\n",
              name.c_str(), kv_type_name(kt), rows_p.size(), mp, wp, mg, wg, worst_cpu, worst_cpu_graph, ids_differ,
              argmax_differ);
  EXPECT_LE(mp, rows_median) << name;
  EXPECT_LE(wp, 5e-2f) << name;
  EXPECT_LE(worst_cpu, cpu_bound) << name;
  EXPECT_EQ(ids_differ, 0) << name;
  EXPECT_EQ(argmax_differ, 0) << name;
}

#define SKIP_WITHOUT_GPU() \
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device"

TEST(CudaPersistentStep, Gemma3LikeQ4_0MatchesGraphAndCpu) {
  SKIP_WITHOUT_GPU();
  auto m = synth::synth_model("gemma-3-1b", small(false, 128));
  for (KVType kt : {KVType::F16, KVType::BF16, KVType::F32}) check(*m, "gemma3-like Q4_0 hd 128", kt, 1e-2f);
}

// The tuning switches give the same results within the same bounds: the flag barrier, two CTAs
// per multiprocessor, the L2 prefetch of the next layer, larger attention splits.
TEST(CudaPersistentStep, TuningVariantsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  auto m = synth::synth_model("gemma-3-1b", small(false, 128));
  const std::vector<std::vector<std::pair<std::string, std::string>>> envs = {
      {{"EG_CUDA_STEP_BARRIER", "flag"}},
      {{"EG_CUDA_STEP_CTAS", "2"}},
      {{"EG_CUDA_STEP_PREFETCH", "1"}},
      {{"EG_CUDA_SPLIT_MIN_KEYS", "32"}, {"EG_CUDA_STEP_CTAS", "2"}}};
  for (const auto& env : envs) check(*m, "gemma3-like Q4_0 hd 128, " + env[0].first, KVType::F16, 1e-2f, 5e-3f, env);
}

TEST(CudaPersistentStep, Gemma3LikeHeadDim256Q8_0MatchesGraphAndCpu) {
  SKIP_WITHOUT_GPU();
  auto m = synth::synth_model("gemma-3-1b", small(false, 256), DType::Q8_0);
  // This model amplifies more: on the H200 both GPU steps had a row median of 7.6-7.7e-3 and last
  // rows of 1.0-1.1e-2 against the CPU (the graph step alike), so 1e-2 / 2e-2 here.
  check(*m, "gemma3-like Q8_0 hd 256", KVType::F16, 2e-2f, 1e-2f);
}

TEST(CudaPersistentStep, Gemma2LikeSoftcapQ4_0MatchesGraphAndCpu) {
  SKIP_WITHOUT_GPU();
  auto m = synth::synth_model("gemma-2-2b", small(true, 64));
  check(*m, "gemma2-like Q4_0 hd 64 (softcap, GQA 2)", KVType::F16, 2e-2f);
}

// F16 matrices are not taken by the persistent step: the executor keeps the graph step.
TEST(CudaPersistentStep, F16MatricesKeepTheGraphStep) {
  SKIP_WITHOUT_GPU();
  auto m = synth::synth_model("gemma-3-1b", small(false, 128), DType::F16);
  auto e = gpu(*m, "persistent");
  EXPECT_EQ(e->description().find("persistent"), std::string::npos);
}

TEST(CudaPersistentStep, BadModeIsAnError) {
  SKIP_WITHOUT_GPU();
  auto m = synth::synth_model("gemma-3-1b", small(false, 128));
  EXPECT_THROW(gpu(*m, "megakernel"), Error);
  EXPECT_THROW(gpu(*m, "persistent", {{"EG_CUDA_STEP_BARRIER", "spin"}}), Error);
}

}  // namespace
}  // namespace eg
