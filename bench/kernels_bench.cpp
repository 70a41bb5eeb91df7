// Micro-benchmarks of the CPU kernels. Reports bytes/s of weights streamed and flop/s, so each
// number can be read against the machine's memory-bandwidth and compute roofline
// (docs/performance.md). Run: build/bench/kernels_bench --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "core/dtype.h"
#include "ops/ops.h"

namespace {

std::vector<uint16_t> random_bf16(size_t n) {
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = eg::f32_to_bf16(d(rng));
  return v;
}

// y[T, N] = x[T, K] · W[N, K]ᵀ with BF16 weights (the decode case is T = 1).
void BM_MatmulBF16(benchmark::State& st) {
  const int64_t T = st.range(0), N = st.range(1), K = st.range(2);
  const auto w = random_bf16(static_cast<size_t>(N * K));
  std::vector<float> x(T * K, 0.5f), y(T * N);
  const eg::ops::Weight W{w.data(), eg::DType::BF16, N, K};
  for (auto _ : st) {
    eg::ops::matmul(x.data(), T, W, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["weight_bytes/s"] = benchmark::Counter(static_cast<double>(N * K * 2), benchmark::Counter::kIsIterationInvariantRate);
  st.counters["flop/s"] = benchmark::Counter(static_cast<double>(2 * T * N * K), benchmark::Counter::kIsIterationInvariantRate);
}
// gemma-3-1b shapes: q_proj 1024x1152, gate 6912x1152, down 1152x6912.
BENCHMARK(BM_MatmulBF16)->Args({1, 1024, 1152})->Args({1, 6912, 1152})->Args({1, 1152, 6912})
    ->Args({64, 6912, 1152})->UseRealTime();

void BM_Attention(benchmark::State& st) {
  const int64_t n_pos = st.range(0), H = 4, KVH = 1, D = 256;
  std::vector<float> k(n_pos * KVH * D, 0.01f), v(n_pos * KVH * D, 0.02f), q(H * D, 0.1f), out(H * D);
  const int32_t pos = static_cast<int32_t>(n_pos - 1);
  const eg::ops::AttentionParams p{H, KVH, D, 0.0625f, 0.0f, 0};
  for (auto _ : st) {
    eg::ops::attention(q.data(), 1, &pos, k.data(), v.data(), p, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["kv_bytes/s"] = benchmark::Counter(static_cast<double>(2 * n_pos * KVH * D * 4), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Attention)->Arg(512)->Arg(4096)->UseRealTime();

}  // namespace
