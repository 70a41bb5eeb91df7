// The CUDA executor's GEMM prefill (EG_CUDA_PREFILL=gemm) against the CPU executor and the step
// loop (EG_CUDA_PREFILL=steps). Label "cuda"; skips without a GPU.
//
// Models: synthetic small Gemma 3 and Gemma 2 decoders built in memory (tests/cuda_synth_model.h:
// Q4_0 matrices, Q8_0 embedding, sliding window 48, Gemma 2 with soft-capping and GQA 2; one with
// F16 matrices), and the tiny GGUFs when present ($EG_CUDA_TEST_MODELS or the shared fixtures).
// Prompts: the executor test's three reference prompts and one of 150 tokens (longer than every
// sliding window: 48 synthetic, 128 tiny). Chunk sizes 1, 7, 64, 512 (EG_CUDA_PREFILL_CHUNK),
// BF16 and F16 GEMMs, weights dequantized per matrix and once, KV f16 / bf16 / f32.
//
// Checked: the last position's logits (LogitsMode::Last; LogitsMode::All for chunk 7) against the
// CPU executor and against the step loop: greedy id equal, max_v |Δlogit| ≤ 1e-2 · (max − min of
// the reference row) — the executor test's measure and bound (the CPU quantizes activations to
// int8 per 32-block, the GEMM path rounds them and the weights to 16 bits: both are ~0.4% per
// value). Then 3 decode steps after the prefill, teacher-forced on the CPU's ids, against the CPU
// (the device KV rows the prefill wrote are what decode reads). The worst errors are printed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "cuda_synth_model.h"
#include "exec/executor.h"
#include "core/error.h"
#include "model/model.h"

#ifndef EG_SHARED_DIR
#define EG_SHARED_DIR ""
#endif

namespace eg {
namespace {

std::string find_gguf(const std::string& name, const std::string& file) {
  namespace fs = std::filesystem;
  if (const char* d = std::getenv("EG_CUDA_TEST_MODELS"))
    if (fs::exists(fs::path(d) / file)) return (fs::path(d) / file).string();
  const fs::path p = fs::path(EG_SHARED_DIR) / "models" / "gguf" / name / file;
  return fs::exists(p) ? p.string() : "";
}

float rel_err(const float* ref, const float* got, int64_t n) {
  float e = 0.0f, lo = ref[0], hi = ref[0];
  for (int64_t i = 0; i < n; ++i) {
    e = std::max(e, std::fabs(ref[i] - got[i]));
    lo = std::min(lo, ref[i]);
    hi = std::max(hi, ref[i]);
  }
  return e / std::max(1e-6f, hi - lo);
}

std::vector<std::vector<int32_t>> prompts(int64_t V) {
  std::vector<std::vector<int32_t>> ps = {
      {2, 818, 5279, 529, 7001, 563},
      {2, 106, 1645, 108, 3689, 4094, 3085, 236761, 107},
      {2, 17, 17, 17, 4, 901, 1234, 4321, 8000, 12, 77, 5000, 6000, 100, 200, 300, 400, 500},
  };
  std::vector<int32_t> lng = {2};
  for (int i = 1; i < 150; ++i) lng.push_back((i * 7919 + 13) % 30000);
  ps.push_back(lng);
  for (auto& p : ps)
    for (auto& t : p) t %= static_cast<int32_t>(V);
  return ps;
}

struct Env {
  std::vector<std::pair<std::string, std::string>> vars;
  Env(std::vector<std::pair<std::string, std::string>> v) : vars(std::move(v)) {
    for (const auto& [k, x] : vars) setenv(k.c_str(), x.c_str(), 1);
  }
  ~Env() {
    for (const auto& [k, x] : vars) unsetenv(k.c_str());
  }
};

std::unique_ptr<StepExecutor> gpu_executor(const Model& m, std::vector<std::pair<std::string, std::string>> env) {
  Env e(std::move(env));
  return make_executor(m, parse_device("cuda"));
}

struct Worst {
  float cpu = 0.0f, steps = 0.0f, decode = 0.0f;
};

// One prefill configuration over all prompts; returns the worst errors.
Worst check_config(const Model& m, const StepExecutor& cpu, const StepExecutor& steps, const StepExecutor& gemm,
                   KVType kv_type, bool all_rows, const std::string& what) {
  const int64_t V = m.config().vocab_size;
  KVCacheOptions ko;
  ko.type = kv_type;
  ko.max_tokens = 192;
  Worst w;
  int pi = 0;
  for (const std::vector<int32_t>& p : prompts(V)) {
    const int T = static_cast<int>(p.size());
    const LogitsMode mode = all_rows ? LogitsMode::All : LogitsMode::Last;
    auto kc = cpu.new_kv_cache(ko), ks = steps.new_kv_cache(ko), kg = gemm.new_kv_cache(ko);
    auto wc = cpu.new_workspace(), wsp = steps.new_workspace(), wg = gemm.new_workspace();
    std::vector<float> lc, ls, lg;
    cpu.prefill(p.data(), T, *kc, *wc, mode, lc);
    steps.prefill(p.data(), T, *ks, *wsp, mode, ls);
    gemm.prefill(p.data(), T, *kg, *wg, mode, lg);
    EXPECT_EQ(kg->n_past(), T);
    EXPECT_EQ(lg.size(), lc.size());
    if (lg.size() != lc.size()) return w;
    const int rows = all_rows ? T : 1;
    for (int r = 0; r < rows; ++r) {
      const float* c = lc.data() + static_cast<size_t>(r) * V;
      const float* g = lg.data() + static_cast<size_t>(r) * V;
      const float ec = rel_err(c, g, V), es = rel_err(ls.data() + static_cast<size_t>(r) * V, g, V);
      w.cpu = std::max(w.cpu, ec);
      w.steps = std::max(w.steps, es);
      EXPECT_LE(ec, 1e-2f) << what << " prompt " << pi << " row " << r << " vs cpu";
      EXPECT_LE(es, 1e-2f) << what << " prompt " << pi << " row " << r << " vs steps";
      EXPECT_EQ(argmax_row(c, V), argmax_row(g, V)) << what << " prompt " << pi << " row " << r;
    }
    int32_t next = argmax_row(lc.data() + static_cast<size_t>(rows - 1) * V, V);
    for (int s = 0; s < 3; ++s) {
      cpu.prefill(&next, 1, *kc, *wc, LogitsMode::Last, lc);
      KVCache* kp = kg.get();
      gemm.decode(&next, 1, &kp, *wg, lg);
      const float e = rel_err(lc.data(), lg.data(), V);
      w.decode = std::max(w.decode, e);
      EXPECT_LE(e, 1e-2f) << what << " prompt " << pi << " decode step " << s;
      const int32_t want = argmax_row(lc.data(), V);
      EXPECT_EQ(want, argmax_row(lg.data(), V)) << what << " prompt " << pi << " decode step " << s;
      next = want;
    }
    ++pi;
  }
  std::printf("%-58s worst max|dlogit|/range: vs cpu %.2e, vs steps %.2e, decode after %.2e\n", what.c_str(), w.cpu,
              w.steps, w.decode);
  return w;
}

void check_model(const Model& m, const std::string& name) {
  auto cpu = make_cpu_executor(m);
  auto steps = gpu_executor(m, {{"EG_CUDA_PREFILL", "steps"}});
  for (int chunk : {1, 7, 64, 512}) {
    auto g = gpu_executor(m, {{"EG_CUDA_PREFILL", "gemm"}, {"EG_CUDA_PREFILL_CHUNK", std::to_string(chunk)}});
    check_config(m, *cpu, *steps, *g, KVType::F16, chunk == 7, name + " chunk " + std::to_string(chunk) + (chunk == 7 ? " (all rows)" : ""));
  }
  {
    auto g = gpu_executor(m, {{"EG_CUDA_PREFILL_CHUNK", "64"}, {"EG_CUDA_PREFILL_WEIGHTS", "once"}});
    check_config(m, *cpu, *steps, *g, KVType::F16, false, name + " chunk 64, weights once");
  }
  {
    auto g = gpu_executor(m, {{"EG_CUDA_PREFILL_CHUNK", "64"}, {"EG_CUDA_PREFILL_TYPE", "f16"}});
    check_config(m, *cpu, *steps, *g, KVType::F16, false, name + " chunk 64, f16 gemm");
  }
  auto g = gpu_executor(m, {{"EG_CUDA_PREFILL_CHUNK", "64"}});
  for (KVType kt : {KVType::BF16, KVType::F32}) {
    // The step loop on a cache of the same type.
    check_config(m, *cpu, *steps, *g, kt, false, name + " chunk 64, kv " + kv_type_name(kt));
  }
}

nlohmann::json small(bool gemma2) {
  nlohmann::json o = {{"vocab_size", 4096}, {"hidden_size", 256}, {"intermediate_size", 512},
                      {"num_attention_heads", 4}, {"sliding_window", 48}, {"head_dim", 64},
                      {"query_pre_attn_scalar", 64}};
  if (gemma2) o.update({{"num_hidden_layers", 4}, {"num_key_value_heads", 2}});
  else o.update({{"num_hidden_layers", 6}, {"num_key_value_heads", 1}, {"head_dim", 128}, {"query_pre_attn_scalar", 128}});
  return o;
}

#define SKIP_WITHOUT_GPU() \
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device"

TEST(CudaPrefill, SyntheticGemma3MatchesCpuAndSteps) {
  SKIP_WITHOUT_GPU();
  auto m = synth::synth_model("gemma-3-1b", small(false));
  check_model(*m, "synthetic gemma3 (hd 128, Q4_0)");
}

TEST(CudaPrefill, SyntheticGemma2MatchesCpuAndSteps) {
  SKIP_WITHOUT_GPU();
  auto m = synth::synth_model("gemma-2-2b", small(true));
  check_model(*m, "synthetic gemma2 (softcap, GQA 2, Q4_0)");
}

TEST(CudaPrefill, SyntheticF16MatricesMatchCpu) {
  SKIP_WITHOUT_GPU();
  auto m = synth::synth_model("gemma-3-1b", small(false), DType::F16);
  auto cpu = make_cpu_executor(*m);
  auto steps = gpu_executor(*m, {{"EG_CUDA_PREFILL", "steps"}});
  auto g = gpu_executor(*m, {{"EG_CUDA_PREFILL_CHUNK", "64"}});
  check_config(*m, *cpu, *steps, *g, KVType::F16, false, "synthetic gemma3, F16 matrices, chunk 64");
}

TEST(CudaPrefill, TinyGgufsMatchCpuAndSteps) {
  SKIP_WITHOUT_GPU();
  int found = 0;
  for (const auto& [name, file] : {std::pair<std::string, std::string>{"tiny-gemma3", "tiny-gemma3-q8_0.gguf"},
                                   {"tiny-gemma2", "tiny-gemma2-q8_0.gguf"}}) {
    const std::string path = find_gguf(name, file);
    if (path.empty()) continue;
    ++found;
    auto m = Model::load_gguf(path);
    check_model(*m, file);
  }
  if (found == 0) GTEST_SKIP() << "no tiny GGUF found";
}

TEST(CudaPrefill, BadOptionsAndInputThrow) {
  SKIP_WITHOUT_GPU();
  auto m = synth::synth_model("gemma-3-1b", small(false));
  EXPECT_THROW(gpu_executor(*m, {{"EG_CUDA_PREFILL", "fast"}}), Error);
  EXPECT_THROW(gpu_executor(*m, {{"EG_CUDA_PREFILL_WEIGHTS", "all"}}), Error);
  EXPECT_THROW(gpu_executor(*m, {{"EG_CUDA_PREFILL_TYPE", "f32"}}), Error);
  auto g = gpu_executor(*m, {{"EG_CUDA_PREFILL_CHUNK", "4"}});
  KVCacheOptions ko;
  ko.max_tokens = 8;
  auto kv = g->new_kv_cache(ko);
  auto ws = g->new_workspace();
  std::vector<float> logits;
  const int32_t bad[] = {1, 2, 3, 99999};
  EXPECT_THROW(g->prefill(bad, 4, *kv, *ws, LogitsMode::Last, logits), Error);
  EXPECT_EQ(kv->n_past(), 0);
  const int32_t nine[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  EXPECT_THROW(g->prefill(nine, 9, *kv, *ws, LogitsMode::Last, logits), Error);
  EXPECT_EQ(kv->n_past(), 0);
  g->prefill(nine, 8, *kv, *ws, LogitsMode::None, logits);
  EXPECT_EQ(kv->n_past(), 8);
}

}  // namespace
}  // namespace eg
