// AVX-512 VNNI kernel for the packed Q6_Kx16 layout (packed_q6k.cpp describes the bytes).
//
// One zmm lane per weight row. Per 256-block and sub-block quad j (sub-blocks j, j+4, j+8, j+12),
// for i = 0..3: two low-nibble vectors and one high-bit vector give the 6-bit codes (u8, 0..63)
// of 4 chunks, each multiplied by its 4 activation codes (one broadcast dword) with `vpdpbusd`
// into that sub-block's int32 chain, which starts at −32·bsum_s; the quad's 4 chains are then
// multiplied by the rows' int8 scales (vpmulld) and summed: the exact integer of the row kernel.
// Float step per block: acc = acc + (d_w·d_x)·float(is), as the row kernel (no fma;
// -ffp-contract=off). Tiles: one 16-row group × C ≤ 3 tokens per pass; decode: 2 groups × 1 token.
#include <cstddef>
#include <cstdint>

#include "backend/cpu/packed.h"
#include "quant/blocks.h"

#if defined(__x86_64__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define EG_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#endif

namespace eg::cpu {

void packed_gemm_q6k_reference(const void* packed, int64_t K, int64_t n0, int64_t n1, const void* acts,
                               size_t a_row_bytes, int64_t T, float* y, int64_t ldy);

#if defined(__x86_64__)
namespace {

using quant::BlockQ8_K;

constexpr size_t kQ6Col = 3360, kScales = 32, kLo = 288, kHi = 2336;
constexpr size_t kAhead = 8;  // blocks prefetched ahead (2, 4, 8 measured: 8 was best, by a little)

// One 16-row group × C ≤ 3 tokens (G = 1), or G = 2 groups (group stride gs) × 1 token.
template <int C, int G>
EG_AVX512_VNNI void q6k_tile(const uint8_t* P, size_t gs, int64_t nb, const BlockQ8_K* const* a, float* const* y) {
  static_assert(G == 1 || C == 1);
  constexpr int R = C * G;  // independent (token, group) pairs
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  __m512 acc[R];
  for (int c = 0; c < R; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i is[R], offs[C];
    for (int c = 0; c < R; ++c) is[c] = _mm512_setzero_si512();
    for (int c = 0; c < C; ++c)  // −32·bsum_s in lane s
      offs[c] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                 _mm512_slli_epi32(_mm512_cvtepi16_epi32(_mm256_loadu_si256(
                                                       reinterpret_cast<const __m256i*>(a[c][b].bsums))),
                                                   5));
    for (int j = 0; j < 4; ++j) {
      __m512i S[R][4];
      for (int c = 0; c < C; ++c)
        for (int s = 0; s < 4; ++s) {
          const __m512i o = _mm512_permutexvar_epi32(_mm512_set1_epi32(j + 4 * s), offs[c]);
          for (int g = 0; g < G; ++g) S[c * G + g][s] = o;
        }
      for (int i = 0; i < 4; ++i) {
        const int v = 4 * j + i;
        for (int g = 0; g < G; ++g) {
          const uint8_t* col = P + g * gs + static_cast<size_t>(b) * kQ6Col;
          // A block kAhead ahead (3360 bytes = 53 lines; 4 lines per step cover it): without it
          // the kernel streamed at ~0.7 of the row kernel's rate (three interleaved streams per
          // block; the hardware prefetcher fell behind).
          for (int l = 0; l < 4; ++l)
            _mm_prefetch(reinterpret_cast<const char*>(col + kAhead * kQ6Col + 64 * (4 * v + l)), _MM_HINT_T0);
          const __m512i L0 = _mm512_loadu_si512(col + kLo + 64 * v);
          const __m512i L1 = _mm512_loadu_si512(col + kLo + 64 * (16 + v));
          const __m512i H = _mm512_loadu_si512(col + kHi + 64 * v);
          const __m512i q0 =
              _mm512_or_si512(_mm512_and_si512(L0, m4), _mm512_and_si512(_mm512_slli_epi16(H, 4), m30));
          const __m512i q1 =
              _mm512_or_si512(_mm512_and_si512(L1, m4), _mm512_and_si512(_mm512_slli_epi16(H, 2), m30));
          const __m512i q2 =
              _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L0, 4), m4), _mm512_and_si512(H, m30));
          const __m512i q3 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L1, 4), m4),
                                             _mm512_and_si512(_mm512_srli_epi16(H, 2), m30));
          for (int c = 0; c < C; ++c) {
            const auto* xq = reinterpret_cast<const int32_t*>(a[c][b].qs);
            __m512i* Sr = S[c * G + g];
            Sr[0] = _mm512_dpbusd_epi32(Sr[0], q0, _mm512_set1_epi32(xq[v]));
            Sr[1] = _mm512_dpbusd_epi32(Sr[1], q1, _mm512_set1_epi32(xq[16 + v]));
            Sr[2] = _mm512_dpbusd_epi32(Sr[2], q2, _mm512_set1_epi32(xq[32 + v]));
            Sr[3] = _mm512_dpbusd_epi32(Sr[3], q3, _mm512_set1_epi32(xq[48 + v]));
          }
        }
      }
      for (int g = 0; g < G; ++g) {
        const uint8_t* col = P + g * gs + static_cast<size_t>(b) * kQ6Col;
        for (int s = 0; s < 4; ++s) {
          const __m512i sc = _mm512_cvtepi8_epi32(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(col + kScales + 16 * (j + 4 * s))));
          for (int c = 0; c < C; ++c)
            is[c * G + g] = _mm512_add_epi32(is[c * G + g], _mm512_mullo_epi32(S[c * G + g][s], sc));
        }
      }
    }
    for (int g = 0; g < G; ++g) {
      const uint8_t* col = P + g * gs + static_cast<size_t>(b) * kQ6Col;
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(col)));
      for (int c = 0; c < C; ++c)
        acc[c * G + g] = _mm512_add_ps(acc[c * G + g], _mm512_mul_ps(_mm512_mul_ps(dw, _mm512_set1_ps(a[c][b].d)),
                                                                     _mm512_cvtepi32_ps(is[c * G + g])));
    }
  }
  for (int c = 0; c < C; ++c)
    for (int g = 0; g < G; ++g) _mm512_storeu_ps(y[c] + 16 * g, acc[c * G + g]);
}

}  // namespace

void packed_gemm_q6k_avx512(const void* packed, int64_t K, int64_t n0, int64_t n1, const void* acts,
                            size_t a_row_bytes, int64_t T, float* y, int64_t ldy) {
  const int64_t nb = K / 256;
  const size_t gs = static_cast<size_t>(nb) * kQ6Col;  // bytes per 16-row group
  const auto* base = static_cast<const uint8_t*>(packed);
  const auto* ab = static_cast<const uint8_t*>(acts);
  const int64_t g0 = n0 / kPackRows, g1 = n1 / kPackRows;
  if (T == 1) {
    const auto* a = reinterpret_cast<const BlockQ8_K*>(ab);
    int64_t g = g0;
    for (; g + 2 <= g1; g += 2) {
      float* yr = y + g * kPackRows;
      q6k_tile<1, 2>(base + g * gs, gs, nb, &a, &yr);
    }
    for (; g < g1; ++g) {
      float* yr = y + g * kPackRows;
      q6k_tile<1, 1>(base + g * gs, gs, nb, &a, &yr);
    }
    return;
  }
  constexpr int64_t kTok = 3;
  for (int64_t t0 = 0; t0 < T; t0 += kTok) {
    const int C = static_cast<int>(T - t0 < kTok ? T - t0 : kTok);
    const BlockQ8_K* a[kTok];
    for (int c = 0; c < C; ++c)
      a[c] = reinterpret_cast<const BlockQ8_K*>(ab + static_cast<size_t>(t0 + c) * a_row_bytes);
    for (int64_t g = g0; g < g1; ++g) {
      float* yr[kTok];
      for (int c = 0; c < C; ++c) yr[c] = y + (t0 + c) * ldy + g * kPackRows;
      const uint8_t* P = base + g * gs;
      switch (C) {
        case 3: q6k_tile<3, 1>(P, gs, nb, a, yr); break;
        case 2: q6k_tile<2, 1>(P, gs, nb, a, yr); break;
        default: q6k_tile<1, 1>(P, gs, nb, a, yr); break;
      }
    }
  }
}

#else  // no x86: never chosen (packed_available is false), the reference keeps it defined

void packed_gemm_q6k_avx512(const void* packed, int64_t K, int64_t n0, int64_t n1, const void* acts,
                            size_t a_row_bytes, int64_t T, float* y, int64_t ldy) {
  packed_gemm_q6k_reference(packed, K, n0, n1, acts, a_row_bytes, T, y, ldy);
}

#endif

}  // namespace eg::cpu
