// cuda_decode_bench: end-to-end decode speed of the CUDA executor on a synthetic model in the
// layout `edgegemma quantize --type q4_0` writes (Q4_0 matrices, Q8_0 embedding since 1152 is not a
// multiple of 256, f32 norms), built in memory with random blocks (tests/cuda_synth_model.h): no
// files, no CLI. --model takes a known model name (model/known_models.h): gemma-3-1b (default),
// gemma-2-2b, gemma-3-270m, gemma-3-4b, or Gemma 4 gemma-4-e2b / gemma-4-e4b (KV-shared layers,
// per-layer embeddings: the Q8_0 PLE table [262144, L·256] stays in host memory, 2.5 GB for E2B,
// the f32 per_layer_model_projection; about 4 s and 4 GB of host memory to build E2B) and
// gemma-4-31b (K=V full layers; large). MoE (gemma-4-26b-a4b) is refused.
//
//   cuda_decode_bench [-p 512] [-n 128] [--model gemma-3-1b] [--check 8] [--variants 1] [--embed q8_0|q6_k]
//                     [--batch B] [--type q4_0|q8_0|bf16]
//
// --type: the layer matrices' type (default q4_0); bf16 makes the embedding BF16 too (an HF BF16
// checkpoint), q8_0 keeps the Q8_0 embedding (`edgegemma quantize --type q8_0`).
//
// Reports pp (prefill of the -p prompt in one call: the GEMM prefill unless EG_CUDA_PREFILL=steps;
// timed after one untimed prefill of the same length), tg through prefill(&id, 1, Last) (what
// `edgegemma bench` times: the [V] logits come to the host) and tg through decode_argmax (only the
// id comes back), with and without programmatic dependent launch; then --check N steps of greedy
// decoding on the CPU executor and the GPU executor from the same prompt (ids and logit error);
// then (--variants 1) pp of the prefill variants (GEMM with per-matrix dequantization, GEMM with
// the weights dequantized once, F16 GEMM, the step loop) and their last-position logits against
// the CPU executor's on the same -p prompt.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "core/dtype.h"
#include "exec/executor.h"
#include "model/config.h"
#include "model/known_models.h"
#include "model/model.h"
#include "../../tests/cuda_synth_model.h"

using namespace eg;
using Clock = std::chrono::steady_clock;

namespace {

uint64_t g_state = 0x9E3779B97F4A7C15ull;
uint64_t next_u64() {
  g_state ^= g_state << 13;
  g_state ^= g_state >> 7;
  g_state ^= g_state << 17;
  return g_state;
}

double secs(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

void run(const StepExecutor& e, int n_prompt, int n_gen, bool pdl) {
  cuda::set_programmatic_launch(pdl);
  const int V = e.config().vocab_size;
  KVCacheOptions ko;
  ko.max_tokens = n_prompt + n_gen;
  std::vector<int32_t> prompt(n_prompt), gen(n_gen);
  for (auto& t : prompt) t = static_cast<int32_t>(next_u64() % V);
  for (auto& t : gen) t = static_cast<int32_t>(next_u64() % V);
  std::vector<float> logits;
  for (int mode = 0; mode < 2; ++mode) {
    auto kv = e.new_kv_cache(ko);
    auto ws = e.new_workspace();
    e.prefill(prompt.data(), 1, *kv, *ws, LogitsMode::Last, logits);  // capture + warm-up
    kv->truncate(0);
    e.prefill(prompt.data(), n_prompt, *kv, *ws, LogitsMode::Last, logits);  // GEMM scratch, cuBLAS plans
    kv->truncate(0);
    auto t0 = Clock::now();
    e.prefill(prompt.data(), n_prompt, *kv, *ws, LogitsMode::Last, logits);
    const double tp = secs(t0);
    t0 = Clock::now();
    KVCache* kp = kv.get();
    for (int i = 0; i < n_gen; ++i) {
      if (mode == 0) {
        e.prefill(&gen[i], 1, *kv, *ws, LogitsMode::Last, logits);
      } else {
        int32_t id;
        e.decode_argmax(&gen[i], 1, &kp, *ws, &id);
      }
    }
    const double tg = secs(t0);
    std::printf("pdl %-3s pp%d %8.1f tok/s | tg%d via %-22s %8.1f tok/s  %.3f ms/token\n", pdl ? "on" : "off",
                n_prompt, n_prompt / tp, n_gen, mode == 0 ? "prefill(Last, logits)" : "decode_argmax (id)",
                n_gen / tg, 1e3 * tg / n_gen);
  }
}

// Batched decode (the server's shape): B caches with a 64-token prompt each, n_gen steps of
// decode_argmax over all B rows in one workspace; tok/s over all rows and ms per step.
void run_batch(const StepExecutor& e, int B, int n_gen) {
  const int V = e.config().vocab_size;
  KVCacheOptions ko;
  ko.max_tokens = 64 + n_gen + 1;
  std::vector<std::unique_ptr<KVCache>> kv;
  std::vector<KVCache*> kp;
  auto ws = e.new_workspace();
  std::vector<int32_t> prompt(64), ids(static_cast<size_t>(B));
  std::vector<float> logits;
  for (int b = 0; b < B; ++b) {
    for (auto& t : prompt) t = static_cast<int32_t>(next_u64() % V);
    kv.push_back(e.new_kv_cache(ko));
    kp.push_back(kv.back().get());
    e.prefill(prompt.data(), 64, *kv.back(), *ws, LogitsMode::None, logits);
    ids[b] = static_cast<int32_t>(next_u64() % V);
  }
  e.decode_argmax(ids.data(), B, kp.data(), *ws, ids.data());  // first use of each row's step
  const auto t0 = Clock::now();
  for (int i = 0; i < n_gen; ++i) e.decode_argmax(ids.data(), B, kp.data(), *ws, ids.data());
  const double t = secs(t0);
  std::printf("batch %2d: tg%d via decode_argmax over %d rows: %8.1f tok/s in all, %.3f ms per step\n", B, n_gen, B,
              B * n_gen / t, 1e3 * t / n_gen);
}

void check(const Model& m, const StepExecutor& gpu, int steps) {
  auto cpu = make_cpu_executor(m);
  const int V = m.config().vocab_size;
  KVCacheOptions ko;
  ko.max_tokens = 16 + steps + 1;
  auto kc = cpu->new_kv_cache(ko), kg = gpu.new_kv_cache(ko);
  auto wc = cpu->new_workspace(), wg = gpu.new_workspace();
  std::vector<int32_t> prompt(16);
  for (auto& t : prompt) t = static_cast<int32_t>(next_u64() % V);
  std::vector<float> lc, lg;
  cpu->prefill(prompt.data(), 16, *kc, *wc, LogitsMode::Last, lc);
  gpu.prefill(prompt.data(), 16, *kg, *wg, LogitsMode::Last, lg);
  int same = 0;
  float worst = 0.0f;
  for (int s = 0; s <= steps; ++s) {
    float e = 0.0f, scale = 1.0f;
    for (int v = 0; v < V; ++v) {
      e = std::max(e, std::fabs(lc[v] - lg[v]));
      scale = std::max(scale, std::fabs(lc[v]));
    }
    worst = std::max(worst, e / scale);
    const int32_t a = argmax_row(lc.data(), V), b = argmax_row(lg.data(), V);
    same += a == b;
    if (s == steps) break;
    cpu->prefill(&a, 1, *kc, *wc, LogitsMode::Last, lc);
    gpu.prefill(&a, 1, *kg, *wg, LogitsMode::Last, lg);
  }
  std::printf("check vs CPU (teacher-forced, %d steps): same greedy id %d/%d, max |dlogit| / max(1, max|logit|) = %.2e\n",
              steps + 1, same, steps + 1, worst);
}

// Largest |a − b| over a row, relative to the range of a (the executor tests' measure).
float rel_range(const std::vector<float>& a, const std::vector<float>& b) {
  float e = 0.0f, lo = a[0], hi = a[0];
  for (size_t i = 0; i < a.size(); ++i) {
    e = std::max(e, std::fabs(a[i] - b[i]));
    lo = std::min(lo, a[i]);
    hi = std::max(hi, a[i]);
  }
  return e / std::max(1e-6f, hi - lo);
}

// pp of each prefill variant (env read when its executor is made) and its last-row logits vs the CPU.
void variants(const Model& m, int n_prompt) {
  cuda::set_programmatic_launch(true);
  const int V = m.config().vocab_size;
  std::vector<int32_t> prompt(n_prompt);
  for (auto& t : prompt) t = static_cast<int32_t>(next_u64() % V);
  KVCacheOptions ko;
  ko.max_tokens = n_prompt;
  std::vector<float> ref;
  {
    auto cpu = make_cpu_executor(m);
    auto kv = cpu->new_kv_cache(ko);
    auto ws = cpu->new_workspace();
    const auto t0 = Clock::now();
    cpu->prefill(prompt.data(), n_prompt, *kv, *ws, LogitsMode::Last, ref);
    std::printf("cpu executor pp%d: %.1f tok/s (the reference of the rows below)\n", n_prompt, n_prompt / secs(t0));
  }
  struct Var { const char* label; const char* mode; const char* weights; const char* type; };
  const Var vs[] = {{"gemm, per-matrix dequant (default)", "gemm", "layer", "bf16"},
                    {"gemm, weights dequantized once", "gemm", "once", "bf16"},
                    {"gemm f16, per-matrix dequant", "gemm", "layer", "f16"},
                    {"steps (decode-step loop)", "steps", "layer", "bf16"}};
  for (const Var& v : vs) {
    setenv("EG_CUDA_PREFILL", v.mode, 1);
    setenv("EG_CUDA_PREFILL_WEIGHTS", v.weights, 1);
    setenv("EG_CUDA_PREFILL_TYPE", v.type, 1);
    auto e = make_executor(m, parse_device("cuda"));
    auto kv = e->new_kv_cache(ko);
    auto ws = e->new_workspace();
    std::vector<float> lg;
    e->prefill(prompt.data(), n_prompt, *kv, *ws, LogitsMode::Last, lg);  // warm-up
    double best = 1e30;
    for (int r = 0; r < 3; ++r) {
      kv->truncate(0);
      const auto t0 = Clock::now();
      e->prefill(prompt.data(), n_prompt, *kv, *ws, LogitsMode::Last, lg);
      best = std::min(best, secs(t0));
    }
    std::printf("prefill %-36s pp%d %9.1f tok/s (best of 3, %.2f ms) | vs cpu: max|dlogit|/range %.2e, greedy id %s\n",
                v.label, n_prompt, n_prompt / best, 1e3 * best, rel_range(ref, lg),
                argmax_row(ref.data(), V) == argmax_row(lg.data(), V) ? "equal" : "DIFFERENT");
  }
  for (const char* n : {"EG_CUDA_PREFILL", "EG_CUDA_PREFILL_WEIGHTS", "EG_CUDA_PREFILL_TYPE"}) unsetenv(n);
}

}  // namespace

int main(int argc, char** argv) {
  int n_prompt = 512, n_gen = 128, n_check = 8, n_variants = 1;
  int n_batch = 0;  // --batch B: also the batched decode of B caches in one workspace
  bool embed_q6k = false;  // --embed q6_k: the embedding / LM head Q6_K (llama-quantize's Q4_0 recipe at H % 256 == 0)
  DType matrix_type = DType::Q4_0;  // --type: the layer matrices
  std::string name = "gemma-3-1b";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "-p") n_prompt = std::atoi(argv[i + 1]);
    else if (a == "-n") n_gen = std::atoi(argv[i + 1]);
    else if (a == "--model") name = argv[i + 1];
    else if (a == "--check") n_check = std::atoi(argv[i + 1]);
    else if (a == "--variants") n_variants = std::atoi(argv[i + 1]);
    else if (a == "--embed") {
      const std::string v = argv[i + 1];
      if (v != "q6_k" && v != "q8_0") {
        std::fprintf(stderr, "cuda_decode_bench: --embed takes q8_0 or q6_k, not '%s'\n", v.c_str());
        return 2;
      }
      embed_q6k = v == "q6_k";
    }
    else if (a == "--batch") n_batch = std::atoi(argv[i + 1]);
    else if (a == "--type") {
      const std::string v = argv[i + 1];
      if (v == "q4_0") matrix_type = DType::Q4_0;
      else if (v == "q8_0") matrix_type = DType::Q8_0;
      else if (v == "bf16") matrix_type = DType::BF16;
      else {
        std::fprintf(stderr, "cuda_decode_bench: --type takes q4_0, q8_0 or bf16, not '%s'\n", v.c_str());
        return 2;
      }
    }
  }
  try {
    if (!cuda::device_available()) {
      std::printf("no CUDA device\n");
      return 0;
    }
    auto t0 = Clock::now();
    const DType embed_type = embed_q6k ? DType::Q6_K : matrix_type == DType::BF16 ? DType::BF16 : DType::Q8_0;
    auto m = synth::synth_model(name, nlohmann::json::object(), matrix_type, 0x9E3779B97F4A7C15ull, embed_type);
    std::printf("synthetic %s (%s, %s embedding%s): %.1f s to build\n", name.c_str(), dtype_name(matrix_type),
                dtype_name(embed_type),
                m->config().ple_dim > 0 ? ", Q8_0 PLE table, f32 PLE projection" : "", secs(t0));
    t0 = Clock::now();
    auto e = make_executor(*m, parse_device("cuda"));
    std::printf("%s: weights uploaded in %.1f s\n", e->description().c_str(), secs(t0));
    run(*e, n_prompt, n_gen, false);
    run(*e, n_prompt, n_gen, true);
    if (n_batch > 0) run_batch(*e, n_batch, n_gen);
    if (n_check > 0) check(*m, *e, n_check);
    if (n_variants > 0) variants(*m, n_prompt);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "cuda_decode_bench: %s\n", ex.what());
    return 1;
  }
  return 0;
}
