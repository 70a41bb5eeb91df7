// AVX-512 VNNI kernels for the packed Q4_0x16 / Q8_0x16 layouts, and AVX-512F kernels for the
// F16x16 / BF16x16 / F32x16 layouts (packed.h). Q6_Kx16: packed_q6k_avx512.cpp.
//
// One zmm lane per weight row: a 64-byte load of a packed chunk gives 4 codes of each of 16 rows,
// `vpdpbusd` multiplies them (u8) by 4 activation codes (s8, one broadcast dword) and adds into
// the row's int32 lane. A block of 32 elements is 8 such steps (Q4_0: 4 loads, low and high
// nibbles; Q8_0: 8 loads of code+128), starting from the integer offset −8·Σq_x (Q4_0) or
// −128·Σq_x (Q8_0), so each lane ends with the exact Σ q_w·q_x of packed.h. Then, per block,
// acc = fma(d_w·d_x, float(isum), acc): the arithmetic of packed.h, lane by lane.
//
// Tiles: prefill runs 2 groups (32 rows) × 6 tokens per pass (12 independent integer chains hide
// the vpdpbusd latency; each activation broadcast feeds both groups, each unpacked chunk 6 tokens;
// an odd last group takes 1 group × 8 tokens), after the full 16-token tiles that go to the AMX
// kernel where it is turned on (packed_amx.cpp, EDGEGEMMA_AMX=1); decode runs 4 groups × 1 token,
// with two integer chains per group. Compiled with function-level targets, so the rest of the binary
// keeps its baseline ISA; packed_avx512_supported() checks the CPU at run time.
#include <cstddef>
#include <cstdint>

#include "backend/cpu/packed.h"

#if defined(__x86_64__)
// GCC 12 warns about the _mm512_undefined_* inside its own AVX-512 conversion intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define EG_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#endif

namespace eg::cpu {

#if defined(__x86_64__)
namespace {

// The 16 rows' int32 sums of one block column for one token, into two chains (ia, ib).
template <bool kQ4>
EG_AVX512_VNNI inline void block_dots(const uint8_t* col, const ActQ8& a, __m512i& ia, __m512i& ib) {
  const uint8_t* q = col + 32;
  const auto* xq = reinterpret_cast<const int32_t*>(a.qs);
  if constexpr (kQ4) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int j = 0; j < 4; ++j) {
      const __m512i v = _mm512_loadu_si512(q + 64 * j);
      ia = _mm512_dpbusd_epi32(ia, _mm512_and_si512(v, m4), _mm512_set1_epi32(xq[j]));
      ib = _mm512_dpbusd_epi32(ib, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4), _mm512_set1_epi32(xq[j + 4]));
    }
  } else {
    for (int j = 0; j < 8; j += 2) {
      ia = _mm512_dpbusd_epi32(ia, _mm512_loadu_si512(q + 64 * j), _mm512_set1_epi32(xq[j]));
      ib = _mm512_dpbusd_epi32(ib, _mm512_loadu_si512(q + 64 * j + 64), _mm512_set1_epi32(xq[j + 1]));
    }
  }
}

template <bool kQ4>
EG_AVX512_VNNI inline __m512i offset(const ActQ8& a) {
  return _mm512_set1_epi32((kQ4 ? -8 : -128) * a.s);
}

// Prefill: one group (16 rows starting at column pointer P) × C tokens (C ≤ 8).
template <bool kQ4, int C>
EG_AVX512_VNNI void tile_tokens(const uint8_t* P, int64_t nb, const ActQ8* const* a, float* const* y) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* col = P + static_cast<size_t>(b) * kPackColBytes<kQ4>;
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(col)));
    __m512i is[C];
    for (int c = 0; c < C; ++c) is[c] = offset<kQ4>(a[c][b]);
    const uint8_t* q = col + 32;
    if constexpr (kQ4) {
      for (int j = 0; j < 4; ++j) {
        const __m512i v = _mm512_loadu_si512(q + 64 * j);
        const __m512i lo = _mm512_and_si512(v, m4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        for (int c = 0; c < C; ++c) {
          const auto* xq = reinterpret_cast<const int32_t*>(a[c][b].qs);
          is[c] = _mm512_dpbusd_epi32(is[c], lo, _mm512_set1_epi32(xq[j]));
          is[c] = _mm512_dpbusd_epi32(is[c], hi, _mm512_set1_epi32(xq[j + 4]));
        }
      }
    } else {
      for (int j = 0; j < 8; ++j) {
        const __m512i v = _mm512_loadu_si512(q + 64 * j);
        for (int c = 0; c < C; ++c) {
          const auto* xq = reinterpret_cast<const int32_t*>(a[c][b].qs);
          is[c] = _mm512_dpbusd_epi32(is[c], v, _mm512_set1_epi32(xq[j]));
        }
      }
    }
    for (int c = 0; c < C; ++c) {
      const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(a[c][b].d));
      acc[c] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(is[c]), acc[c]);
    }
  }
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(y[c], acc[c]);
}

// Prefill on two groups at once (group 1 gs bytes after group 0) × C tokens (C ≤ 6): each
// activation broadcast feeds both groups' vpdpbusd, halving the broadcast loads per product
// (one per product in the 1-group tile); 12 integer chains, 12 f32 accumulators. Same integer sums
// and the same fma chain per output as tile_tokens, so the results are bit-identical.
template <bool kQ4, int C>
EG_AVX512_VNNI void tile_tokens2(const uint8_t* P, size_t gs, int64_t nb, const ActQ8* const* a, float* const* y) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[2][C];
  for (int g = 0; g < 2; ++g)
    for (int c = 0; c < C; ++c) acc[g][c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* col0 = P + static_cast<size_t>(b) * kPackColBytes<kQ4>;
    const uint8_t* cols[2] = {col0, col0 + gs};
    __m512i is[2][C];
    for (int c = 0; c < C; ++c) is[0][c] = is[1][c] = offset<kQ4>(a[c][b]);
    if constexpr (kQ4) {
      for (int j = 0; j < 4; ++j) {
        __m512i lo[2], hi[2];
        for (int g = 0; g < 2; ++g) {
          const __m512i v = _mm512_loadu_si512(cols[g] + 32 + 64 * j);
          lo[g] = _mm512_and_si512(v, m4);
          hi[g] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        }
        for (int c = 0; c < C; ++c) {
          const auto* xq = reinterpret_cast<const int32_t*>(a[c][b].qs);
          const __m512i x0 = _mm512_set1_epi32(xq[j]), x1 = _mm512_set1_epi32(xq[j + 4]);
          for (int g = 0; g < 2; ++g) {
            is[g][c] = _mm512_dpbusd_epi32(is[g][c], lo[g], x0);
            is[g][c] = _mm512_dpbusd_epi32(is[g][c], hi[g], x1);
          }
        }
      }
    } else {
      for (int j = 0; j < 8; ++j) {
        const __m512i v0 = _mm512_loadu_si512(cols[0] + 32 + 64 * j), v1 = _mm512_loadu_si512(cols[1] + 32 + 64 * j);
        for (int c = 0; c < C; ++c) {
          const __m512i x = _mm512_set1_epi32(reinterpret_cast<const int32_t*>(a[c][b].qs)[j]);
          is[0][c] = _mm512_dpbusd_epi32(is[0][c], v0, x);
          is[1][c] = _mm512_dpbusd_epi32(is[1][c], v1, x);
        }
      }
    }
    for (int g = 0; g < 2; ++g) {
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(cols[g])));
      for (int c = 0; c < C; ++c) {
        const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(a[c][b].d));
        acc[g][c] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(is[g][c]), acc[g][c]);
      }
    }
  }
  for (int g = 0; g < 2; ++g)
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(y[c] + g * kPackRows, acc[g][c]);
}

// Decode: G groups (16 rows each, group stride gs bytes) × 1 token.
// Columns ahead in each stream for the software prefetch (8 measured best: docs/performance.md).
constexpr size_t kDecodeAhead = 8;
template <bool kQ4, int G>
EG_AVX512_VNNI void tile_groups(const uint8_t* P, size_t gs, int64_t nb, const ActQ8* a, float* y) {
  __m512 acc[G];
  for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m512i off = offset<kQ4>(a[b]);
    const __m512 dx = _mm512_set1_ps(a[b].d);
    for (int g = 0; g < G; ++g) {
      const uint8_t* col = P + g * gs + static_cast<size_t>(b) * kPackColBytes<kQ4>;
      // Software prefetch kDecodeAhead columns ahead in each of the G streams (a prefetch never
      // faults, so the last columns' prefetches past the group are harmless).
      for (size_t l = 0; l < kPackColBytes<kQ4>; l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(col + kDecodeAhead * kPackColBytes<kQ4> + l), _MM_HINT_T0);
      __m512i ia = off, ib = _mm512_setzero_si512();
      block_dots<kQ4>(col, a[b], ia, ib);
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(col)));
      acc[g] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(_mm512_add_epi32(ia, ib)), acc[g]);
    }
  }
  for (int g = 0; g < G; ++g) _mm512_storeu_ps(y + 16 * g, acc[g]);
}

template <bool kQ4>
void run_tokens2(const uint8_t* P, size_t gs, int64_t nb, const ActQ8* const* a, float* const* y, int C) {
  switch (C) {
    case 6: tile_tokens2<kQ4, 6>(P, gs, nb, a, y); break;
    case 5: tile_tokens2<kQ4, 5>(P, gs, nb, a, y); break;
    case 4: tile_tokens2<kQ4, 4>(P, gs, nb, a, y); break;
    case 3: tile_tokens2<kQ4, 3>(P, gs, nb, a, y); break;
    case 2: tile_tokens2<kQ4, 2>(P, gs, nb, a, y); break;
    default: tile_tokens2<kQ4, 1>(P, gs, nb, a, y); break;
  }
}

template <bool kQ4>
void run_tokens(const uint8_t* P, int64_t nb, const ActQ8* const* a, float* const* y, int C) {
  switch (C) {
    case 8: tile_tokens<kQ4, 8>(P, nb, a, y); break;
    case 7: tile_tokens<kQ4, 7>(P, nb, a, y); break;
    case 6: tile_tokens<kQ4, 6>(P, nb, a, y); break;
    case 5: tile_tokens<kQ4, 5>(P, nb, a, y); break;
    case 4: tile_tokens<kQ4, 4>(P, nb, a, y); break;
    case 3: tile_tokens<kQ4, 3>(P, nb, a, y); break;
    case 2: tile_tokens<kQ4, 2>(P, nb, a, y); break;
    default: tile_tokens<kQ4, 1>(P, nb, a, y); break;
  }
}

template <bool kQ4>
void gemm(const void* packed, int64_t K, int64_t n0, int64_t n1, const void* acts, size_t a_row_bytes,
          int64_t T, float* y, int64_t ldy) {
  const int64_t nb = K / 32;
  const size_t gs = static_cast<size_t>(nb) * kPackColBytes<kQ4>;  // bytes per 16-row group
  const auto* base = static_cast<const uint8_t*>(packed);
  const auto* ab = static_cast<const uint8_t*>(acts);
  const int64_t g0 = n0 / kPackRows, g1 = n1 / kPackRows;
  if (T == 1) {
    const auto* a = reinterpret_cast<const ActQ8*>(ab);
    int64_t g = g0;
    for (; g + 4 <= g1; g += 4) tile_groups<kQ4, 4>(base + g * gs, gs, nb, a, y + g * kPackRows);
    for (; g + 2 <= g1; g += 2) tile_groups<kQ4, 2>(base + g * gs, gs, nb, a, y + g * kPackRows);
    for (; g < g1; ++g) tile_groups<kQ4, 1>(base + g * gs, gs, nb, a, y + g * kPackRows);
    return;
  }
  // Full 16-token tiles on AMX when it is turned on (packed_amx.cpp), the rest here.
  const int64_t done = packed_amx_enabled()
                           ? packed_gemm_amx(kQ4 ? DType::Q4_0 : DType::Q8_0, packed, K, n0, n1, acts, a_row_bytes, T, y, ldy)
                           : 0;
  // Token tiles of 6 on group pairs (tile_tokens2); an odd last group on the 1-group tile.
  constexpr int64_t kTok = 6;
  for (int64_t t0 = done; t0 < T; t0 += kTok) {
    const int C = static_cast<int>(T - t0 < kTok ? T - t0 : kTok);
    const ActQ8* a[kTok];
    float* yr[kTok];
    for (int c = 0; c < C; ++c) a[c] = reinterpret_cast<const ActQ8*>(ab + static_cast<size_t>(t0 + c) * a_row_bytes);
    int64_t g = g0;
    for (; g + 2 <= g1; g += 2) {
      for (int c = 0; c < C; ++c) yr[c] = y + (t0 + c) * ldy + g * kPackRows;
      run_tokens2<kQ4>(base + g * gs, gs, nb, a, yr, C);
    }
    if (g < g1) {
      for (int c = 0; c < C; ++c) yr[c] = y + (t0 + c) * ldy + g * kPackRows;
      run_tokens<kQ4>(base + g * gs, nb, a, yr, C);
    }
  }
}

// ---- F16x16 / BF16x16 / F32x16 (packed.h): one fma chain per output over k in order ----

#define EG_AVX512F __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

enum Kind { kF16, kBF16, kF32 };
template <int kKind>
constexpr size_t kElem = kKind == kF32 ? 4 : 2;

template <int kKind>
EG_AVX512F inline __m512 load_col(const uint8_t* p) {  // the 16 rows' weights of one column k
  if constexpr (kKind == kF32) {
    return _mm512_loadu_ps(p);
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (kKind == kBF16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      return _mm512_cvtph_ps(h);
    }
  }
}

// Prefill: G groups (G ≤ 2, group stride gs bytes) × C tokens (C ≤ 12, rows K floats apart from
// x): acc[g][c] = fma(w_gk, x[c][k], acc[g][c]) for k = 0 .. K-1. 2 × 12 accumulators hide the
// fma latency (4 cycles on 2 ports) with room to spare, and each converted weight column feeds 12
// tokens, so per k the loop issues 24 fmas against 2 column conversions (2 uops each on BF16).
template <int kKind, int G, int C>
EG_AVX512F void float_tile_tokens(const uint8_t* P, size_t gs, int64_t K, const float* x, float* y, int64_t ldy) {
  __m512 acc[G][C];
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < C; ++c) acc[g][c] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const uint8_t* pk = P + static_cast<size_t>(k) * kPackRows * kElem<kKind>;
    __m512 w[G];
    for (int g = 0; g < G; ++g) w[g] = load_col<kKind>(pk + g * gs);
    for (int c = 0; c < C; ++c) {
      const __m512 xv = _mm512_set1_ps(x[c * K + k]);
      for (int g = 0; g < G; ++g) acc[g][c] = _mm512_fmadd_ps(w[g], xv, acc[g][c]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + c * ldy + g * kPackRows, acc[g][c]);
}

// C tokens of a token tile on G groups, as tiles of 12, 8, 4, 2 and 1 tokens (each token's chains
// are the same whichever tile holds it).
template <int kKind, int G>
void float_tokens(const uint8_t* P, size_t gs, int64_t K, const float* x, int64_t C, float* y, int64_t ldy) {
  int64_t c = 0;
  for (; c + 12 <= C; c += 12) float_tile_tokens<kKind, G, 12>(P, gs, K, x + c * K, y + c * ldy, ldy);
  if (c + 8 <= C) {
    float_tile_tokens<kKind, G, 8>(P, gs, K, x + c * K, y + c * ldy, ldy);
    c += 8;
  }
  if (c + 4 <= C) {
    float_tile_tokens<kKind, G, 4>(P, gs, K, x + c * K, y + c * ldy, ldy);
    c += 4;
  }
  if (c + 2 <= C) {
    float_tile_tokens<kKind, G, 2>(P, gs, K, x + c * K, y + c * ldy, ldy);
    c += 2;
  }
  if (c < C) float_tile_tokens<kKind, G, 1>(P, gs, K, x + c * K, y + c * ldy, ldy);
}

// Decode: G groups (group stride gs bytes) × 1 token.
// Bytes ahead in each stream (BF16 LM head 262144×1152, quant_bench, 2-vCPU EPYC: no prefetch
// 14.8–15.5 ms, 1024 13.0–13.9, 2048 11.5–11.6, 4096 12.7–12.8).
constexpr size_t kFloatAhead = 2048;
template <int kKind, int G>
EG_AVX512F void float_tile_groups(const uint8_t* P, size_t gs, int64_t K, const float* x, float* y) {
  __m512 acc[G];
  for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
  // One 64-byte line of each stream holds kPerLine columns (BF16/F16 2, F32 1): prefetch a line
  // kFloatAhead bytes ahead in each of the G streams once per line, as the block GEMV does.
  constexpr int64_t kPerLine = 64 / (kPackRows * kElem<kKind>);
  for (int64_t k0 = 0; k0 < K; k0 += kPerLine) {
    const uint8_t* pl = P + static_cast<size_t>(k0) * kPackRows * kElem<kKind>;
    for (int g = 0; g < G; ++g) _mm_prefetch(reinterpret_cast<const char*>(pl + g * gs + kFloatAhead), _MM_HINT_T0);
    const int64_t k1 = k0 + kPerLine < K ? k0 + kPerLine : K;
    for (int64_t k = k0; k < k1; ++k) {
      const __m512 xv = _mm512_set1_ps(x[k]);
      const uint8_t* pk = P + static_cast<size_t>(k) * kPackRows * kElem<kKind>;
      for (int g = 0; g < G; ++g) acc[g] = _mm512_fmadd_ps(load_col<kKind>(pk + g * gs), xv, acc[g]);
    }
  }
  for (int g = 0; g < G; ++g) _mm512_storeu_ps(y + 16 * g, acc[g]);
}

template <int kKind>
void float_gemm(const void* packed, int64_t K, int64_t n0, int64_t n1, const float* x, int64_t T, float* y,
                int64_t ldy) {
  const size_t gs = static_cast<size_t>(K) * kPackRows * kElem<kKind>;  // bytes per 16-row group
  const auto* base = static_cast<const uint8_t*>(packed);
  const int64_t g0 = n0 / kPackRows, g1 = n1 / kPackRows;
  if (T == 1) {
    int64_t g = g0;
    for (; g + 4 <= g1; g += 4) float_tile_groups<kKind, 4>(base + g * gs, gs, K, x, y + g * kPackRows);
    for (; g < g1; ++g) float_tile_groups<kKind, 1>(base + g * gs, gs, K, x, y + g * kPackRows);
    return;
  }
  // Token tiles of 48 (4 × 12: their activation rows, 48·K floats, stay in L2 while the task's
  // groups stream past them), group pairs inside.
  constexpr int64_t kTok = 48;
  for (int64_t t0 = 0; t0 < T; t0 += kTok) {
    const int64_t C = T - t0 < kTok ? T - t0 : kTok;
    int64_t g = g0;
    for (; g + 2 <= g1; g += 2)
      float_tokens<kKind, 2>(base + g * gs, gs, K, x + t0 * K, C, y + t0 * ldy + g * kPackRows, ldy);
    if (g < g1) float_tokens<kKind, 1>(base + g * gs, gs, K, x + t0 * K, C, y + t0 * ldy + g * kPackRows, ldy);
  }
}

}  // namespace

bool packed_float_avx512_supported() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

void packed_gemm_float_avx512(DType t, const void* packed, int64_t K, int64_t n0, int64_t n1, const float* x,
                              int64_t T, float* y, int64_t ldy) {
  if (t == DType::BF16) {
    float_gemm<kBF16>(packed, K, n0, n1, x, T, y, ldy);
  } else if (t == DType::F32) {
    float_gemm<kF32>(packed, K, n0, n1, x, T, y, ldy);
  } else {
    float_gemm<kF16>(packed, K, n0, n1, x, T, y, ldy);
  }
}

bool packed_avx512_supported() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vnni");
}

void packed_gemm_avx512(DType t, const void* packed, int64_t K, int64_t n0, int64_t n1, const void* acts,
                        size_t a_row_bytes, int64_t T, float* y, int64_t ldy) {
  if (t == DType::Q4_0) {
    gemm<true>(packed, K, n0, n1, acts, a_row_bytes, T, y, ldy);
  } else {
    gemm<false>(packed, K, n0, n1, acts, a_row_bytes, T, y, ldy);
  }
}

#else  // no x86: the portable reference (packing is never chosen: packed_avx512_supported is false)

bool packed_avx512_supported() { return false; }
bool packed_float_avx512_supported() { return false; }

void packed_gemm_float_avx512(DType t, const void* packed, int64_t K, int64_t n0, int64_t n1, const float* x,
                              int64_t T, float* y, int64_t ldy) {
  packed_gemm_float_reference(t, packed, K, n0, n1, x, T, y, ldy);
}

void packed_gemm_avx512(DType t, const void* packed, int64_t K, int64_t n0, int64_t n1, const void* acts,
                        size_t a_row_bytes, int64_t T, float* y, int64_t ldy) {
  packed_gemm_reference(t, packed, K, n0, n1, acts, a_row_bytes, T, y, ldy);
}

#endif

}  // namespace eg::cpu
