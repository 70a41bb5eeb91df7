// Batched decode (Model::forward_batch): total decode tok/s of B sequences stepped together (one
// matrix-matrix pass per step) vs the same B sequences stepped one after another with forward()
// (what a server without batching does). Each sequence holds a 32-token prompt; every iteration
// appends one token to each of the B sequences. Counters: tok/s (wall clock) and tok/s_cpu (per
// second of the calling thread's CPU time, Google Benchmark's default: only meaningful with
// OMP_NUM_THREADS=1, where it is the single-core throughput, less sensitive to other load on a
// shared machine than the wall clock).
//
// Model: $EG_BENCH_MODEL (a Hugging Face directory or a .gguf; default
// ../shared/models/tiny-gemma3). For the numbers in docs/performance-serving.md ("Batched decode"):
//   build/edgegemma synth --like gemma-3-1b -o /tmp/g1b
//   build/edgegemma quantize -m /tmp/g1b -o /tmp/g1b-q4_0.gguf --type q4_0
//   EG_BENCH_MODEL=/tmp/g1b-q4_0.gguf build/bench/batch_bench
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "model/model.h"

namespace {

const eg::Model& model() {
  static const std::unique_ptr<eg::Model> m = [] {
    const char* e = std::getenv("EG_BENCH_MODEL");
    const std::string path = e ? e : std::string(EG_SHARED_DIR) + "/models/tiny-gemma3";
    return path.size() > 5 && path.substr(path.size() - 5) == ".gguf" ? eg::Model::load_gguf(path)
                                                                       : eg::Model::load_dir(path);
  }();
  return *m;
}

// B caches holding the same 32-token prompt (prefilled once, copied with save/load).
std::vector<eg::KVCache> make_caches(int B) {
  const eg::Model& m = model();
  eg::KVCacheOptions o;
  o.max_tokens = 4096;
  eg::KVCache first(m.config(), o);
  std::vector<int32_t> prompt(32);
  for (int i = 0; i < 32; ++i) prompt[i] = 2 + (i * 7919) % 1000;
  eg::ForwardScratch s;
  std::vector<float> logits;
  m.forward(prompt.data(), 32, first, s, eg::LogitsMode::None, logits);
  std::stringstream ss;
  first.save(ss);
  const std::string bytes = ss.str();
  std::vector<eg::KVCache> kvs;
  for (int b = 0; b < B; ++b) {
    std::istringstream is(bytes);
    kvs.push_back(eg::KVCache::load(is, m.config()));
  }
  return kvs;
}

void set_counters(benchmark::State& state, int B, std::chrono::steady_clock::time_point t0) {
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  state.counters["tok/s"] = static_cast<double>(B) * static_cast<double>(state.iterations()) / wall;
  // Rates of Google Benchmark divide by the CPU time (no UseRealTime).
  state.counters["tok/s_cpu"] = benchmark::Counter(B, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_DecodeBatched(benchmark::State& state) {
  const int B = static_cast<int>(state.range(0));
  std::vector<eg::KVCache> kvs = make_caches(B);
  std::vector<eg::KVCache*> ptrs;
  for (auto& k : kvs) ptrs.push_back(&k);
  std::vector<int32_t> toks(B);
  for (int b = 0; b < B; ++b) toks[b] = 100 + b;
  eg::ForwardScratch s;
  std::vector<float> logits;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    model().forward_batch(toks.data(), B, ptrs.data(), s, logits);
    benchmark::DoNotOptimize(logits.data());
  }
  set_counters(state, B, t0);
}

void BM_DecodeSequential(benchmark::State& state) {
  const int B = static_cast<int>(state.range(0));
  std::vector<eg::KVCache> kvs = make_caches(B);
  eg::ForwardScratch s;
  std::vector<float> logits;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    for (int b = 0; b < B; ++b) {
      const int32_t t = 100 + b;
      model().forward(&t, 1, kvs[b], s, eg::LogitsMode::Last, logits);
    }
    benchmark::DoNotOptimize(logits.data());
  }
  set_counters(state, B, t0);
}

}  // namespace

BENCHMARK(BM_DecodeBatched)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_DecodeSequential)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Unit(benchmark::kMillisecond)->MinTime(2.0);
