// The knowledge base's exact vector scan (kb/vector_scan.h): cosine of one query against N stored
// float32 vectors, plus top-k. Reports vectors/s and GB/s of vectors read.
//   build/bench/kb_scan_bench --benchmark_filter=Scan
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kb/vector_scan.h"

namespace {

void BM_CosineScan(benchmark::State& st) {
  const size_t n = static_cast<size_t>(st.range(0)), dim = static_cast<size_t>(st.range(1));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> rows(n * dim), q(dim), out(n);
  for (auto& x : rows) x = u(rng);
  for (auto& x : q) x = u(rng);
  for (auto _ : st) {
    eg::kb::cosine_scan(q.data(), rows.data(), n, dim, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::DoNotOptimize(eg::kb::top_k(out.data(), n, 50));
  }
  st.counters["vectors/s"] = benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(n * dim * sizeof(float)));
  st.SetLabel(eg::kb::scan_target_name());
}
// 10k / 100k chunks of EmbeddingGemma's 768 (and its 256 Matryoshka) dimensions.
BENCHMARK(BM_CosineScan)->Args({10000, 768})->Args({100000, 768})->Args({100000, 256})->Unit(benchmark::kMillisecond);

}  // namespace
