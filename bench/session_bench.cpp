// Session benchmarks: time to first token with cold weights (the model files evicted from the
// page cache with posix_fadvise(DONTNEED) before loading) vs after Session::warmup(), and a
// second chat turn reusing the KV cache vs the same prompt prefilled from scratch.
//
// Model: $EG_BENCH_MODEL (a Hugging Face directory; default ../shared/models/tiny-gemma3).
// Run: build/bench/session_bench --benchmark_repetitions=5
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "engine/loaded_model.h"
#include "engine/session.h"

namespace {

std::string model_dir() {
  if (const char* e = std::getenv("EG_BENCH_MODEL")) return e;
  return std::string(EG_SHARED_DIR) + "/models/tiny-gemma3";
}

void evict_model_files(const std::string& dir) {
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    if (f.path().extension() != ".safetensors") continue;
    const int fd = ::open(f.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

const char* kQuestion = "Tell me about the sea and the ships that sail on it.";

eg::GenerateParams one_token() {
  eg::GenerateParams g;
  g.max_new_tokens = 1;
  return g;
}

void BM_TTFT(benchmark::State& state, bool warm) {
  const std::string dir = model_dir();
  double ttft = 0;
  for (auto _ : state) {
    state.PauseTiming();
    if (!warm) evict_model_files(dir);
    std::shared_ptr<const eg::LoadedModel> lm = eg::LoadedModel::load_dir(dir);
    eg::Session s(lm);
    if (warm) s.warmup();
    state.ResumeTiming();
    const eg::TurnResult r = s.chat(kQuestion, one_token());
    ttft += r.stats.ttft_ms;
    benchmark::DoNotOptimize(r.ids.data());
  }
  state.counters["ttft_ms"] = benchmark::Counter(ttft, benchmark::Counter::kAvgIterations);
}

void BM_TTFT_Cold(benchmark::State& state) { BM_TTFT(state, false); }
void BM_TTFT_Warm(benchmark::State& state) { BM_TTFT(state, true); }
BENCHMARK(BM_TTFT_Cold)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_TTFT_Warm)->Unit(benchmark::kMillisecond)->Iterations(3);

// Second turn: with the KV cache of turn 1 (only the new turn is prefilled) vs from scratch.
void BM_SecondTurn(benchmark::State& state) {
  const bool reuse = state.range(0) != 0;
  std::shared_ptr<const eg::LoadedModel> lm = eg::LoadedModel::load_dir(model_dir());
  eg::GenerateParams g;
  g.max_new_tokens = 32;
  double ttft = 0;
  for (auto _ : state) {
    state.PauseTiming();
    eg::Session s(lm);
    s.chat(kQuestion, g);
    if (!reuse) {
      std::vector<eg::ChatMessage> h = s.messages();
      s.reset();
      for (const auto& m : h) s.add_message(m.role, m.content);
    }
    state.ResumeTiming();
    const eg::TurnResult r = s.chat("And what about the night sky above it?", one_token());
    ttft += r.stats.ttft_ms;
  }
  state.counters["ttft_ms"] = benchmark::Counter(ttft, benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_SecondTurn)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond);

}  // namespace
