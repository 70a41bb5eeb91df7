// Memory read bandwidth of this machine, for the decode roofline (bench/compare-llamacpp.sh:
// roofline tok/s = this bandwidth ÷ the weight bytes a generated token reads). Each thread sums its
// slice of a 512 MiB buffer (16× a 32 MiB L3, so the reads come from DRAM) with four independent
// accumulators, prefetching 4 KiB ahead; the rate is the total bytes over the wall time
// (UseRealTime), so with Threads(2) it is what two threads together stream, as decode with -t 2.
// BM_ReadBandwidthStreams/S reads the same slice as S interleaved streams (S sub-slices walked in
// step, each prefetched ahead), the access pattern of the packed decode GEMV (one stream per
// 16-row group): on some machines one stream per core under-states what DRAM delivers, so the
// roofline takes the best of the variants (bench/compare-llamacpp.sh).
//   build/bench/membw_bench --benchmark_filter='ReadBandwidth.*/threads:2$'
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

namespace {

constexpr size_t kAhead = 512;  // prefetch distance in uint64 (4 KiB)

const std::vector<uint64_t>& buffer() {
  static const std::vector<uint64_t> b(size_t{1} << 26, 0x0101010101010101ull);  // 512 MiB, touched
  return b;
}

void BM_ReadBandwidth(benchmark::State& st) {
  const std::vector<uint64_t>& b = buffer();
  const size_t n = b.size() / static_cast<size_t>(st.threads()) / 8 * 8;
  const uint64_t* p = b.data() + n * static_cast<size_t>(st.thread_index());
  for (auto _ : st) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i < n; i += 8) {
      __builtin_prefetch(p + i + kAhead);
      s0 += p[i] + p[i + 4];
      s1 += p[i + 1] + p[i + 5];
      s2 += p[i + 2] + p[i + 6];
      s3 += p[i + 3] + p[i + 7];
    }
    uint64_t s = s0 + s1 + s2 + s3;
    benchmark::DoNotOptimize(s);
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(n * sizeof(uint64_t)));
}
BENCHMARK(BM_ReadBandwidth)->Threads(1)->Threads(2)->UseRealTime()->MinTime(0.5);

void BM_ReadBandwidthStreams(benchmark::State& st) {
  const std::vector<uint64_t>& b = buffer();
  const size_t streams = static_cast<size_t>(st.range(0));
  const size_t n = b.size() / static_cast<size_t>(st.threads()) / (8 * streams) * (8 * streams);
  const size_t per = n / streams;  // uint64 per stream, a multiple of 8
  const uint64_t* p = b.data() + n * static_cast<size_t>(st.thread_index());
  constexpr size_t kStreamAhead = 64;  // 512 bytes ahead in each stream
  for (auto _ : st) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i < per; i += 8) {
      for (size_t k = 0; k < streams; ++k) {
        const uint64_t* q = p + k * per + i;
        __builtin_prefetch(q + kStreamAhead);
        s0 += q[0] + q[4];
        s1 += q[1] + q[5];
        s2 += q[2] + q[6];
        s3 += q[3] + q[7];
      }
    }
    uint64_t s = s0 + s1 + s2 + s3;
    benchmark::DoNotOptimize(s);
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(n * sizeof(uint64_t)));
}
BENCHMARK(BM_ReadBandwidthStreams)->Arg(4)->Arg(16)->Threads(1)->Threads(2)->UseRealTime()->MinTime(0.5);

}  // namespace
