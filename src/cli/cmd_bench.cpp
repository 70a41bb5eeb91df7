// `edgegemma bench`: prefill and decode speed like llama-bench (pp<p> / tg<n> tests, optionally
// at a context depth), plus TTFT, load time and peak RSS. Each test runs once as warm-up, then
// -r times; we report the median and the min/max over the repetitions. Token ids are random
// (fixed seed 42): speed does not depend on them. Timings include the LM head of the last
// position (prefill) or of every decoded token, as llama-bench's do. "TTFT from process start" is
// the time from the process's start (Linux /proc/self/stat, 1/CLK_TCK resolution) to the end of the
// first (warm-up, cold) prefill of the -p prompt: dynamic loading, model load, upload, first prefill.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <time.h>
#include <unistd.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/thread_pool.h"
#include "cli/commands.h"
#include "core/error.h"
#include "engine/loaded_model.h"

namespace eg::cli {

namespace {

struct BenchArgs {
  std::string model_dir;
  int n_prompt = 512;
  int n_gen = 128;
  int depth = 0;
  int threads = 0;
  int reps = 5;
  bool json = false;
  std::string device = "auto";
  std::string kv_type = "f16";
};

using Clock = std::chrono::steady_clock;

struct Stats {
  double median = 0, min = 0, max = 0;
};

Stats stats_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v.front(), v.back()};
}

struct TestResult {
  std::string name;
  int n_prompt = 0, n_gen = 0;
  std::vector<double> seconds;  // one per repetition (warm-up excluded)
};

// Seconds of one run: prefill `depth` tokens untimed, then either a timed prefill of n_prompt
// tokens (one forward call) or n_gen timed single-token decode steps. The KV cache and the
// workspace (scratch buffers, GEMM plans, captured graphs) are the test's, made once and reused by
// the warm-up and every repetition; each run starts from an emptied cache. A session reuses its
// own the same way, and llama-bench its context; fresh ones per run would time their allocation
// and graph capture (~2 ms of a 512-token GPU prefill).
double run_once(const StepExecutor& e, KVCache& kv, StepWorkspace& s, int depth, int n_prompt, int n_gen,
                std::mt19937& rng, int vocab) {
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  kv.clear();
  std::vector<float> logits;
  if (depth > 0) {
    std::vector<int32_t> ctx(depth);
    for (auto& t : ctx) t = tok(rng);
    e.prefill(ctx.data(), depth, kv, s, LogitsMode::None, logits);
  }
  if (n_prompt > 0) {
    std::vector<int32_t> p(n_prompt);
    for (auto& t : p) t = tok(rng);
    const auto t0 = Clock::now();
    e.prefill(p.data(), n_prompt, kv, s, LogitsMode::Last, logits);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
  std::vector<int32_t> ids(n_gen);
  for (auto& t : ids) t = tok(rng);
  const auto t0 = Clock::now();
  for (int i = 0; i < n_gen; ++i) e.prefill(&ids[i], 1, kv, s, LogitsMode::Last, logits);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Milliseconds since this process started, or -1 where /proc/self/stat is not available.
double ms_since_process_start() {
  std::ifstream f("/proc/self/stat");
  std::string line;
  if (!f || !std::getline(f, line)) return -1.0;
  const size_t close = line.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return -1.0;
  std::istringstream in(line.substr(close + 1));
  std::string field;
  unsigned long long start_ticks = 0;
  for (int i = 3; i <= 22 && in >> field; ++i)  // field 3 (state) ... field 22 (starttime)
    if (i == 22) start_ticks = std::stoull(field);
  timespec now{};
  const long tck = sysconf(_SC_CLK_TCK);
  if (start_ticks == 0 || tck <= 0 || clock_gettime(CLOCK_BOOTTIME, &now) != 0) return -1.0;
  const double now_ms = 1e3 * static_cast<double>(now.tv_sec) + 1e-6 * static_cast<double>(now.tv_nsec);
  return now_ms - 1e3 * static_cast<double>(start_ticks) / static_cast<double>(tck);
}

std::string human_size(double bytes) {
  char b[32];
  if (bytes >= 1024.0 * 1024 * 1024) std::snprintf(b, sizeof b, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  else std::snprintf(b, sizeof b, "%.2f MiB", bytes / (1024.0 * 1024));
  return b;
}

std::string human_params(double n) {
  char b[32];
  if (n >= 1e9) std::snprintf(b, sizeof b, "%.2f B", n / 1e9);
  else std::snprintf(b, sizeof b, "%.2f M", n / 1e6);
  return b;
}

int run_bench(const BenchArgs& a) {
  if (a.n_prompt == 0 && a.n_gen == 0) throw Error("nothing to measure: -p and -n are both 0");
  if (a.reps < 1) throw Error("-r must be >= 1");
  apply_threads(a.threads);
  const std::string dir = model_path(a.model_dir);
  auto lm = LoadedModel::load(dir, parse_device(a.device));
  const Model& m = lm->model();
  const StepExecutor& exec = lm->executor();
  const KVType kv_type = parse_kv_type(a.kv_type);
  const std::string backend = exec.device() == Device::CPU ? std::string("CPU ") + cpu::simd_target_name()
                                                           : std::string(device_name(exec.device()));
  const ModelConfig& cfg = m.config();
  const int need = a.depth + std::max(a.n_prompt, a.n_gen);
  if (cfg.max_position_embeddings > 0 && need > cfg.max_position_embeddings)
    throw Error("depth + max(p, n) = " + std::to_string(need) + " tokens exceed the model's context of " +
                std::to_string(cfg.max_position_embeddings));
  int vocab = cfg.vocab_size;
  if (cfg.ple_dim > 0) vocab = std::min(vocab, cfg.ple_vocab);
  const int threads = cpu::num_threads();
  // Weight bytes: the safetensors tensors of a directory, or the whole .gguf file.
  std::error_code ec;
  const size_t size_bytes = std::filesystem::is_regular_file(dir, ec) ? std::filesystem::file_size(dir)
                                                                      : m.weights().store.total_bytes();
  const int64_t params = cfg.parameter_count();
  const DType wtype = cfg.n_layers > 0 ? m.weights().layers[0].q.dtype : m.weights().embed.dtype;
  const std::string model_name = std::string(cfg.model_type) + " " + human_params(static_cast<double>(params)) + " " +
                                 dtype_name(wtype);

  std::mt19937 rng(42);
  std::vector<TestResult> tests;
  const std::string at = a.depth > 0 ? " @ d" + std::to_string(a.depth) : "";
  if (a.n_prompt > 0) tests.push_back({"pp" + std::to_string(a.n_prompt) + at, a.n_prompt, 0, {}});
  if (a.n_gen > 0) tests.push_back({"tg" + std::to_string(a.n_gen) + at, 0, a.n_gen, {}});
  double cold_ttft_ms = -1.0;  // process start → end of the first prefill
  for (TestResult& t : tests) {
    std::fprintf(stderr, "bench: %s: warm-up", t.name.c_str());
    std::fflush(stderr);
    KVCacheOptions ko;
    ko.type = kv_type;
    ko.max_tokens = a.depth + std::max(t.n_prompt, t.n_gen);
    const std::unique_ptr<KVCache> kv = exec.new_kv_cache(ko);
    const std::unique_ptr<StepWorkspace> ws = exec.new_workspace();
    run_once(exec, *kv, *ws, a.depth, t.n_prompt, t.n_gen, rng, vocab);
    if (t.n_prompt > 0 && cold_ttft_ms < 0) cold_ttft_ms = ms_since_process_start();
    for (int r = 0; r < a.reps; ++r) {
      std::fprintf(stderr, ", %d", r + 1);
      std::fflush(stderr);
      t.seconds.push_back(run_once(exec, *kv, *ws, a.depth, t.n_prompt, t.n_gen, rng, vocab));
    }
    std::fprintf(stderr, "\n");
  }
  const size_t rss = peak_rss_bytes();

  nlohmann::json jt = nlohmann::json::array();
  for (const TestResult& t : tests) {
    const int n = t.n_prompt + t.n_gen;
    std::vector<double> tps, ms;
    for (double s : t.seconds) {
      tps.push_back(n / s);
      ms.push_back(1e3 * s);
    }
    const Stats st = stats_of(tps), sm = stats_of(ms);
    jt.push_back({{"name", t.name},
                  {"n_prompt", t.n_prompt},
                  {"n_gen", t.n_gen},
                  {"depth", a.depth},
                  {"reps", a.reps},
                  {"tok_s", {{"median", st.median}, {"min", st.min}, {"max", st.max}}},
                  {"ms", {{"median", sm.median}, {"min", sm.min}, {"max", sm.max}}},
                  {"samples_tok_s", tps}});
  }
  // TTFT: time from a prompt of -p tokens (after the depth context) to the first token's logits.
  nlohmann::json ttft = nullptr, ttft_cold = nullptr;
  if (a.n_prompt > 0) ttft = jt[0]["ms"];
  if (cold_ttft_ms >= 0) ttft_cold = cold_ttft_ms;

  if (a.json) {
    const nlohmann::json j = {{"model", dir},
                              {"model_name", model_name},
                              {"model_type", cfg.model_type},
                              {"size_bytes", size_bytes},
                              {"params", params},
                              {"weight_dtype", dtype_name(wtype)},
                              {"threads", threads},
                              {"simd", cpu::simd_target_name()},
                              {"device", device_name(exec.device())},
                              {"executor", exec.description()},
                              {"kv_type", kv_type_name(kv_type)},
                              {"load_ms", lm->load_ms()},
                              {"ttft_ms", ttft},
                              {"ttft_from_process_start_ms", ttft_cold},
                              {"peak_rss_bytes", rss},
                              {"tests", jt}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("| %-30s | %10s | %10s | %-8s | %7s | %15s | %28s |\n", "model", "size", "params", "backend", "threads",
              "test", "t/s (median, min - max)");
  std::printf("| %s | %s: | %s: | %s | %s: | %s: | %s: |\n", std::string(30, '-').c_str(), std::string(9, '-').c_str(),
              std::string(9, '-').c_str(), std::string(8, '-').c_str(), std::string(6, '-').c_str(),
              std::string(14, '-').c_str(), std::string(27, '-').c_str());
  for (const auto& t : jt) {
    char tps[64];
    std::snprintf(tps, sizeof tps, "%.2f (%.2f - %.2f)", t["tok_s"]["median"].get<double>(),
                  t["tok_s"]["min"].get<double>(), t["tok_s"]["max"].get<double>());
    std::printf("| %-30s | %10s | %10s | %-8s | %7d | %15s | %28s |\n", model_name.c_str(),
                human_size(static_cast<double>(size_bytes)).c_str(), human_params(static_cast<double>(params)).c_str(),
                backend.substr(0, 8).c_str(), threads,
                t["name"].get<std::string>().c_str(), tps);
  }
  std::printf("\nload %.1f ms", lm->load_ms());
  if (a.n_prompt > 0)
    std::printf(", TTFT (pp%d%s) %.1f ms (min %.1f, max %.1f)", a.n_prompt, at.c_str(), ttft["median"].get<double>(),
                ttft["min"].get<double>(), ttft["max"].get<double>());
  if (cold_ttft_ms >= 0) std::printf(", TTFT from process start %.0f ms", cold_ttft_ms);
  std::printf(", peak RSS %s, %d reps after 1 warm-up, %s\n", human_size(static_cast<double>(rss)).c_str(), a.reps,
              exec.description().c_str());
  return 0;
}

}  // namespace

Action register_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  app.add_option("-m,--model", a->model_dir, "model directory or .gguf file (default: bundled tiny-gemma3)");
  app.add_option("-p,--n-prompt", a->n_prompt, "prompt tokens of the prefill test (default 512; 0 = skip)")->check(kCount);
  app.add_option("-n,--n-gen", a->n_gen, "tokens of the decode test (default 128; 0 = skip)")->check(kCount);
  app.add_option("-d,--depth", a->depth, "context tokens already in the KV cache before each test (default 0)")
      ->check(kCount);
  app.add_option("-t,--threads", a->threads, "CPU threads, 1..1024 (default: all cores)")
      ->check(CLI::Range(0, 1024, "a thread count"));
  app.add_option("-r,--repetitions", a->reps, "timed repetitions per test after one warm-up (default 5)")
      ->check(CLI::Range(1, 1000, "a repetition count"));
  app.add_option("--device", a->device, "where steps run: auto (default), cpu or cuda");
  app.add_option("--kv-type", a->kv_type, "KV-cache storage: f16 (default, as run/chat/serve), bf16, f32, int8");
  app.add_flag("--json", a->json, "print one JSON object (tests with tok/s median/min/max, ttft_ms, load_ms, peak_rss_bytes)");
  return [a] { return run_bench(*a); };
}

}  // namespace eg::cli
