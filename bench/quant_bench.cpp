// Quantized matmul kernels against the memory roofline. Reports weight bytes/s and flop/s per
// weight type for decode (T = 1, matrix-vector) and prefill (T = 64) at Gemma-like shapes, and a
// STREAM-like read bandwidth (BM_StreamRead) to compare against (docs/performance.md,
// "Quantized kernels"). Run: build/bench/quant_bench --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/packed.h"
#include "backend/cpu/thread_pool.h"
#include "core/dtype.h"
#include "ops/ops.h"
#include "quant/quant.h"

namespace {

using eg::DType;

const DType kTypes[] = {DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                        DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::EG_Q4_G128};

std::vector<uint8_t> make_weights(DType t, int64_t N, int64_t K) {
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<float> row(K);
  const size_t rb = eg::dtype_row_bytes(t, K);
  std::vector<uint8_t> w(rb * N);
  for (int64_t n = 0; n < N; ++n) {
    for (auto& v : row) v = d(rng);
    if (t == DType::BF16) {
      for (int64_t k = 0; k < K; ++k) {
        const uint16_t b = eg::f32_to_bf16(row[k]);
        std::memcpy(w.data() + n * rb + 2 * k, &b, 2);
      }
    } else if (t == DType::F32) {
      std::memcpy(w.data() + n * rb, row.data(), rb);
    } else if (n < 64) {  // quantizing every row is slow; repeat the first 64 rows
      eg::quant::quantize_row(t, row.data(), K, w.data() + n * rb);
    } else {
      std::memcpy(w.data() + n * rb, w.data() + (n % 64) * rb, rb);
    }
  }
  return w;
}

// y[T, N] = x[T, K] · W[N, K]ᵀ. Args: type index, N, K, T.
void BM_QuantMatmul(benchmark::State& st) {
  const DType t = kTypes[st.range(0)];
  const int64_t N = st.range(1), K = st.range(2), T = st.range(3);
  if (!eg::row_fits_blocks(t, K)) {  // e.g. K-quants (256) at K = 1152: llama.cpp falls back too
    st.SkipWithError("K is not a multiple of the block size");
    return;
  }
  const auto w = make_weights(t, N, K);
  std::vector<float> x(T * K), y(T * N);
  std::mt19937 rng(2);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (auto& v : x) v = d(rng);
  const eg::ops::Weight W{w.data(), t, N, K};
  for (auto _ : st) {
    eg::ops::matmul(x.data(), T, W, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  st.SetLabel(std::string(eg::dtype_name(t)) + " T=" + std::to_string(T));
  st.counters["weight_bytes/s"] = benchmark::Counter(static_cast<double>(w.size()),
                                                     benchmark::Counter::kIsIterationInvariantRate);
  st.counters["flop/s"] = benchmark::Counter(static_cast<double>(2 * T * N * K),
                                             benchmark::Counter::kIsIterationInvariantRate);
}

void QuantArgs(benchmark::internal::Benchmark* b) {
  for (int ti = 0; ti < static_cast<int>(std::size(kTypes)); ++ti) {
    b->Args({ti, 6912, 1152, 1});   // gemma-3-1b gate/up, decode
    b->Args({ti, 1152, 6912, 1});   // gemma-3-1b down, decode
    b->Args({ti, 8192, 2048, 1});   // 2048x8192 (gemma-2-2b / E2B-like MLP), decode
    b->Args({ti, 6912, 1152, 64});  // prefill chunk of 64 tokens
    b->Args({ti, 8192, 2048, 64});
  }
}
BENCHMARK(BM_QuantMatmul)->Apply(QuantArgs)->UseRealTime();

// The packed (interleaved) layouts against the row layout, same weights (backend/cpu/packed.h).
// Args: 0 = Q4_0 / 1 = Q8_0, N, K, T, packed (0/1). N = 262144 is gemma-3's LM head (memory-bound).
void BM_PackedMatmul(benchmark::State& st) {
  const DType types[] = {DType::Q4_0, DType::Q8_0, DType::Q6_K, DType::F32, DType::BF16};
  const DType t = types[st.range(0)];
  const int64_t N = st.range(1), K = st.range(2), T = st.range(3);
  const bool use_packed = st.range(4) != 0;
  if (use_packed && !eg::cpu::packed_available(t)) {
    st.SkipWithError("no packed kernel on this machine");
    return;
  }
  const auto w = make_weights(t, N, K);
  std::vector<uint8_t> p;
  eg::ops::Weight W{w.data(), t, N, K};
  if (use_packed) {
    p.resize(eg::cpu::packed_bytes(t, N, K));
    eg::cpu::pack_groups(t, w.data(), N, K, 0, N / eg::cpu::kPackRows, p.data());
    W.packed = p.data();
  }
  std::vector<float> x(T * K), y(T * N);
  std::mt19937 rng(2);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (auto& v : x) v = d(rng);
  for (auto _ : st) {
    eg::ops::matmul(x.data(), T, W, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  st.SetLabel(std::string(eg::dtype_name(t)) + " T=" + std::to_string(T) + (use_packed ? " packed" : " rows"));
  st.counters["weight_bytes/s"] = benchmark::Counter(static_cast<double>(w.size()),
                                                     benchmark::Counter::kIsIterationInvariantRate);
  st.counters["flop/s"] = benchmark::Counter(static_cast<double>(2 * T * N * K),
                                             benchmark::Counter::kIsIterationInvariantRate);
}
void PackedArgs(benchmark::internal::Benchmark* b) {
  for (int ti = 0; ti < 2; ++ti)
    for (int pk = 0; pk < 2; ++pk) {
      b->Args({ti, 6912, 1152, 1, pk});
      b->Args({ti, 1152, 6912, 1, pk});
      b->Args({ti, 262144, 1152, 1, pk});
      b->Args({ti, 6912, 1152, 64, pk});
      b->Args({ti, 1152, 6912, 64, pk});
    }
  // Prefill at gemma-3-1b's pp512 shapes (packed only): q/k/v, o, gate (one of two), down.
  for (int64_t n_k : {1536 * 10000 + 1152, 1152 * 10000 + 1024, 6912 * 10000 + 1152, 1152 * 10000 + 6912})
    b->Args({0, n_k / 10000, n_k % 10000, 512, 1});
  b->Args({1, 6912, 1152, 512, 1});  // Q8_0 gate at pp512 (EDGEGEMMA_AMX=0: the VNNI kernel)
  b->Args({4, 6912, 1152, 512, 1});  // BF16 gate and down at pp512: the f32-fma prefill tile
  b->Args({4, 1152, 6912, 512, 1});
  for (int pk = 0; pk < 2; ++pk) {  // gemma-4-e2b: the Q6_K LM head, the F32 per-layer projection
    b->Args({2, 262144, 1536, 1, pk});
    b->Args({2, 256, 1536, 1, pk});  // in L2: the kernel's compute rate
    b->Args({0, 256, 1536, 1, pk});
    b->Args({0, 262144, 1536, 1, pk});
    b->Args({3, 8960, 1536, 1, pk});
    b->Args({3, 8960, 1536, 64, pk});
  }
  // Far larger than any cache, one token: the decode read rate of each layout (Q4_0, Q8_0, BF16).
  for (int ti : {0, 1, 4}) b->Args({ti, 262144, 1152, 1, 1});
  b->Args({4, 262144, 1152, 1, 0});
}
BENCHMARK(BM_PackedMatmul)->Apply(PackedArgs)->UseRealTime();

// STREAM-like read bandwidth: all threads sum a 512 MiB buffer (far larger than the caches).
void BM_StreamRead(benchmark::State& st) {
  const size_t n = (512u << 20) / 8;
  std::vector<uint64_t> buf(n);
  const int T = eg::cpu::num_threads();
  eg::cpu::parallel_for(T, [&](int64_t t, int) {
    for (size_t i = n * static_cast<size_t>(t) / T; i < n * static_cast<size_t>(t + 1) / T; ++i) buf[i] = i;
  });
  std::vector<uint64_t> part(T);
  for (auto _ : st) {
    eg::cpu::parallel_for(T, [&](int64_t t, int) {
      uint64_t s = 0;
      for (size_t i = n * static_cast<size_t>(t) / T; i < n * static_cast<size_t>(t + 1) / T; ++i) s += buf[i];
      part[t] = s;
    });
    uint64_t s = 0;
    for (uint64_t v : part) s += v;
    benchmark::DoNotOptimize(s);
  }
  st.counters["bytes/s"] =
      benchmark::Counter(static_cast<double>(n * 8), benchmark::Counter::kIsIterationInvariantRate);
  st.counters["threads"] = eg::cpu::num_threads();
}
BENCHMARK(BM_StreamRead)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
