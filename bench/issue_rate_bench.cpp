// issue_rate_bench: the peak issue rate of the three AVX-512 multiply-accumulate instructions our
// CPU kernels are built on, i.e. the compute roofline of a prefill (docs/performance.md):
//   vfmadd231ps  16 f32 MACs  (BF16/F16/F32 weights with exact f32 activations)
//   vdpbf16ps    32 bf16 MACs (what a bf16-activation kernel, e.g. llama.cpp's BF16 path, issues)
//   vpdpbusd     64 int8 MACs (Q4_0 / Q8_0 / Q6_K with int8 activations)
// Each thread runs 12 independent accumulator chains (more than latency × ports on current
// x86 cores), so the loop is bound by issue, not latency. Counters: instr/s and MAC/s per
// benchmark (summed over threads with ->Threads(2)). Skips itself on CPUs without the
// instruction (or off x86).
#include <benchmark/benchmark.h>

#if defined(__x86_64__)
#include <immintrin.h>

namespace {

constexpr int kChains = 12;
constexpr long kSteps = 1 << 20;  // steps of kChains instructions per benchmark iteration

#define EG_PEAK_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16,avx512vnni"), noinline))

// An empty asm that "may change" v: the compiler cannot fold or hoist the chain, v stays in a register.
#define EG_OPAQUE(v) asm volatile("" : "+v"(v))

// 12 named accumulators (an array would live on the stack); OP(a) is one instruction on a.
#define EG_CHAINS(T, init, OP, reduce)                                                   \
  T a0 = init(0), a1 = init(1), a2 = init(2), a3 = init(3), a4 = init(4), a5 = init(5);    \
  T a6 = init(6), a7 = init(7), a8 = init(8), a9 = init(9), a10 = init(10), a11 = init(11); \
  for (long s = 0; s < steps; ++s) {                                                     \
    a0 = OP(a0); a1 = OP(a1); a2 = OP(a2); a3 = OP(a3); a4 = OP(a4); a5 = OP(a5);         \
    a6 = OP(a6); a7 = OP(a7); a8 = OP(a8); a9 = OP(a9); a10 = OP(a10); a11 = OP(a11);     \
    EG_OPAQUE(a0); EG_OPAQUE(a1); EG_OPAQUE(a2); EG_OPAQUE(a3); EG_OPAQUE(a4); EG_OPAQUE(a5); \
    EG_OPAQUE(a6); EG_OPAQUE(a7); EG_OPAQUE(a8); EG_OPAQUE(a9); EG_OPAQUE(a10); EG_OPAQUE(a11); \
  }                                                                                      \
  return reduce(a0) + reduce(a1) + reduce(a2) + reduce(a3) + reduce(a4) + reduce(a5) +   \
         reduce(a6) + reduce(a7) + reduce(a8) + reduce(a9) + reduce(a10) + reduce(a11)

EG_PEAK_TARGET float run_fma(long steps) {
  const __m512 x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(0.9999999f);
#define EG_INIT(i) _mm512_set1_ps(1e-9f * (i))
#define EG_OP(v) _mm512_fmadd_ps(v, x, y)
  EG_CHAINS(__m512, EG_INIT, EG_OP, _mm512_reduce_add_ps);
#undef EG_OP
}

EG_PEAK_TARGET float run_bf16(long steps) {
  const __m512bh x = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x3F803F80));  // bf16 pairs (1, 1)
#define EG_OP(v) _mm512_dpbf16_ps(v, x, x)
  EG_CHAINS(__m512, EG_INIT, EG_OP, _mm512_reduce_add_ps);
#undef EG_OP
#undef EG_INIT
}

EG_PEAK_TARGET float run_vnni(long steps) {
  const __m512i x = _mm512_set1_epi32(0x01010101);
#define EG_INIT(i) _mm512_set1_epi32(i)
#define EG_OP(v) _mm512_dpbusd_epi32(v, x, x)
#define EG_RED(v) static_cast<float>(_mm512_reduce_add_epi32(v))
  EG_CHAINS(__m512i, EG_INIT, EG_OP, EG_RED);
#undef EG_RED
#undef EG_OP
#undef EG_INIT
}

bool has_avx512_bf16_vnni() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bf16");
}

// range(0): 0 = vfmadd231ps, 1 = vdpbf16ps, 2 = vpdpbusd.
void BM_IssueRate(benchmark::State& st) {
  if (!has_avx512_bf16_vnni()) {
    st.SkipWithError("needs AVX-512 VNNI and BF16");
    return;
  }
  const int kind = static_cast<int>(st.range(0));
  static constexpr double kMacs[] = {16, 32, 64};
  static const char* kNames[] = {"vfmadd231ps (f32)", "vdpbf16ps (bf16)", "vpdpbusd (int8)"};
  for (auto _ : st) {
    const float r = kind == 0 ? run_fma(kSteps) : kind == 1 ? run_bf16(kSteps) : run_vnni(kSteps);
    benchmark::DoNotOptimize(r);
  }
  const double instr = static_cast<double>(st.iterations()) * kSteps * kChains;
  st.counters["instr/s"] = benchmark::Counter(instr, benchmark::Counter::kIsRate);
  st.counters["MAC/s"] = benchmark::Counter(instr * kMacs[kind], benchmark::Counter::kIsRate);
  st.SetLabel(kNames[kind]);
}
BENCHMARK(BM_IssueRate)->DenseRange(0, 2)->Threads(1)->Threads(2)->UseRealTime();

}  // namespace

#else

void BM_IssueRate(benchmark::State& st) {
  for (auto _ : st) {
  }
  st.SkipWithError("x86 only");
}
BENCHMARK(BM_IssueRate);

#endif
