// Quantized dot-product kernels (quant_kernels.h), compiled once per Highway target. On x86
// AVX2 / AVX-512 targets the per-block integer dots use int8 intrinsics (maddubs/madd, since
// Highway 1.0.3 has no int8 dot op); on every other target (NEON, SSE4, scalar) the portable
// integer loops below, which the compiler vectorizes. Both compute the same exact int32 block
// sums, and the float accumulation (shared code) is identical, so results are bit-identical across
// targets. Source followed for the block layouts: ggml-common.h (see quant/blocks.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/quant_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backend/cpu/quant_kernels.h"
#include "quant/blocks.h"
#include "quant/quant.h"

#if HWY_ARCH_X86
#include <immintrin.h>
#endif

// EG_QK_X86: this pass compiles for a target with AVX2 (AVX2 itself or AVX-512).
#undef EG_QK_X86
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define EG_QK_X86 1
#else
#define EG_QK_X86 0
#endif

HWY_BEFORE_NAMESPACE();
namespace eg::cpu {
namespace HWY_NAMESPACE {

using namespace eg::quant;

#if EG_QK_X86
HWY_INLINE float H2F(uint16_t h) { return _cvtsh_ss(h); }  // exact, as eg::f16_to_f32

HWY_INLINE int32_t HSum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}
// 16 bytes of nibbles -> 32 bytes 0..15 in element order (low nibbles, then high nibbles).
HWY_INLINE __m256i Nibbles(const uint8_t* p) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}
// 32 bits -> 32 bytes, byte i = 0x10 if bit i is set.
HWY_INLINE __m256i HighBits(uint32_t qh) {
  const __m256i shuf = _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL,
                                          0x0303030303030303LL);
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(qh)), shuf);
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}
// Σ u·s over 32 bytes, u unsigned (≤ 128), s signed (|s| ≤ 127): 8 int32 partial sums (exact).
HWY_INLINE __m256i DotU8S8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
HWY_INLINE __m256i Load32(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// The four horizontal sums of v0..v3 (lanes 0..3 of the result); integer adds, so exact.
HWY_INLINE __m128i HSum4(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
  const __m256i t = _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, v3));
  return _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
}
// Per-block partial sums (8 int32 lanes) of Σ q_w·q_x.
HWY_INLINE __m256i VdotQ8(const int8_t* w, const int8_t* x) {
  const __m256i a = Load32(w), b = Load32(x);
  return DotU8S8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}
HWY_INLINE __m256i VdotQ4(const uint8_t* qs, const int8_t* x) {
  return DotU8S8(Nibbles(qs), Load32(x));
}
HWY_INLINE __m256i VdotQ5(const uint8_t* qs, uint32_t qh, const int8_t* x) {
  return DotU8S8(_mm256_or_si256(Nibbles(qs), HighBits(qh)), Load32(x));
}
HWY_INLINE int32_t IdotQ8(const int8_t* w, const int8_t* x) { return HSum(VdotQ8(w, x)); }
HWY_INLINE int32_t IdotQ4(const uint8_t* qs, const int8_t* x) { return HSum(VdotQ4(qs, x)); }
HWY_INLINE int32_t IdotQ5(const uint8_t* qs, uint32_t qh, const int8_t* x) {
  return HSum(VdotQ5(qs, qh, x));
}
// Decode (one token): fused unpack + dot, no spill of the unpacked codes.
// Σ_j sc[j] · Σ_{i in sub-block j} q_i x_i for Q4_K (hbits == nullptr) or Q5_K.
HWY_INLINE int32_t IdotQ45K(const uint8_t* qs, const uint8_t* hbits, const int8_t* x,
                            const uint8_t* sc) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  __m256i acc = _mm256_setzero_si256();
  const __m256i hb = hbits ? Load32(hbits) : _mm256_setzero_si256();
  for (int c = 0; c < 4; ++c) {
    const __m256i q = Load32(qs + 32 * c);
    __m256i lo = _mm256_and_si256(q, m4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    if (hbits) {
      const __m128i s0 = _mm_cvtsi32_si128(2 * c), s1 = _mm_cvtsi32_si128(2 * c + 1);
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(hb, s0), one), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(hb, s1), one), 4));
    }
    const __m256i plo = _mm256_maddubs_epi16(lo, Load32(x + 64 * c));
    const __m256i phi = _mm256_maddubs_epi16(hi, Load32(x + 64 * c + 32));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(plo, _mm256_set1_epi16(sc[2 * c])));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(phi, _mm256_set1_epi16(sc[2 * c + 1])));
  }
  return HSum(acc);
}
// Σ_j sc[j] · Σ_{i in 16-element sub-block j} q_i x_i for Q6_K with unsigned q (0..63).
HWY_INLINE int32_t IdotQ6K(const BlockQ6_K& b, const int8_t* x) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
  __m256i acc = _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h) {
    const __m256i ql0 = Load32(b.ql + 64 * h), ql1 = Load32(b.ql + 64 * h + 32);
    const __m256i qh = Load32(b.qh + 32 * h);
    __m256i q[4];
    q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4),
                           _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
    q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
    for (int k = 0; k < 4; ++k) {
      const int j = 8 * h + 2 * k;  // sub-blocks j (lanes 0..7) and j+1 (lanes 8..15)
      const __m256i scv = _mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_set1_epi16(b.scales[j])), _mm_set1_epi16(b.scales[j + 1]), 1);
      const __m256i p = _mm256_maddubs_epi16(q[k], Load32(x + 128 * h + 32 * k));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, scv));
    }
  }
  return HSum(acc);
}
// K-quant blocks unpacked once (shared by up to 4 tokens): codes[k] are the 32 unsigned codes of
// elements 32k..32k+31, scales[k] the int16 multipliers of their two 16-lane halves (madd).
struct KCodes {
  __m256i codes[8];
  __m256i scales[8];
};
// Q4_K (hbits == nullptr) / Q5_K: sub-block k = elements 32k.., scale sc[k].
HWY_INLINE void UnpackQ45K(const uint8_t* qs, const uint8_t* hbits, const uint8_t* sc, KCodes* u) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  const __m256i hb = hbits ? Load32(hbits) : _mm256_setzero_si256();
  for (int c = 0; c < 4; ++c) {
    const __m256i q = Load32(qs + 32 * c);
    __m256i lo = _mm256_and_si256(q, m4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    if (hbits) {
      const __m128i s0 = _mm_cvtsi32_si128(2 * c), s1 = _mm_cvtsi32_si128(2 * c + 1);
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(hb, s0), one), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(hb, s1), one), 4));
    }
    u->codes[2 * c] = lo;
    u->codes[2 * c + 1] = hi;
    u->scales[2 * c] = _mm256_set1_epi16(sc[2 * c]);
    u->scales[2 * c + 1] = _mm256_set1_epi16(sc[2 * c + 1]);
  }
}
// Q6_K: codes[4h + k] = quarter k of half h (elements 128h + 32k ..), unsigned 0..63; its lanes
// 0..7 / 8..15 of the maddubs result belong to sub-blocks 2(4h+k) and 2(4h+k)+1.
HWY_INLINE void UnpackQ6K(const BlockQ6_K& b, KCodes* u) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
  for (int h = 0; h < 2; ++h) {
    const __m256i ql0 = Load32(b.ql + 64 * h), ql1 = Load32(b.ql + 64 * h + 32);
    const __m256i qh = Load32(b.qh + 32 * h);
    __m256i* q = u->codes + 4 * h;
    q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4),
                           _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
    q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
  }
  for (int m = 0; m < 8; ++m) {
    u->scales[m] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(b.scales[2 * m])),
                                           _mm_set1_epi16(b.scales[2 * m + 1]), 1);
  }
}
// Σ_k Σ_lanes scales[k] · (codes[k] · x[32k..]) over the 256 elements (exact int32).
HWY_INLINE int32_t IdotKCodes(const KCodes& u, const int8_t* x) {
  __m256i acc = _mm256_setzero_si256();
  for (int k = 0; k < 8; ++k) {
    const __m256i p = _mm256_maddubs_epi16(u.codes[k], Load32(x + 32 * k));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, u.scales[k]));
  }
  return HSum(acc);
}
#else   // portable integer code
HWY_INLINE float H2F(uint16_t h) { return f16_to_f32(h); }

HWY_INLINE int32_t IdotQ8(const int8_t* w, const int8_t* x) {
  int32_t s = 0;
  for (int i = 0; i < 32; ++i) s += static_cast<int32_t>(w[i]) * x[i];
  return s;
}
HWY_INLINE int32_t IdotQ4(const uint8_t* qs, const int8_t* x) {
  int32_t s = 0;
  for (int j = 0; j < 16; ++j) s += (qs[j] & 0xF) * x[j] + (qs[j] >> 4) * x[j + 16];
  return s;
}
HWY_INLINE int32_t IdotQ5(const uint8_t* qs, uint32_t qh, const int8_t* x) {
  int32_t s = 0;
  for (int j = 0; j < 16; ++j) {
    const int q0 = (qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
    const int q1 = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
    s += q0 * x[j] + q1 * x[j + 16];
  }
  return s;
}
HWY_INLINE int32_t IdotQ45K(const uint8_t* qs, const uint8_t* hbits, const int8_t* x,
                            const uint8_t* sc) {
  int32_t total = 0;
  for (int c = 0; c < 4; ++c) {
    int32_t slo = 0, shi = 0;
    for (int l = 0; l < 32; ++l) {
      int lo = qs[32 * c + l] & 0xF, hi = qs[32 * c + l] >> 4;
      if (hbits) {
        lo |= ((hbits[l] >> (2 * c)) & 1) << 4;
        hi |= ((hbits[l] >> (2 * c + 1)) & 1) << 4;
      }
      slo += lo * x[64 * c + l];
      shi += hi * x[64 * c + 32 + l];
    }
    total += sc[2 * c] * slo + sc[2 * c + 1] * shi;
  }
  return total;
}
HWY_INLINE int32_t IdotQ6K(const BlockQ6_K& b, const int8_t* x) {
  int32_t sub[16] = {0};
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    const int8_t* xh = x + 128 * h;
    for (int l = 0; l < 32; ++l) {
      const int is = 8 * h + l / 16;
      sub[is + 0] += ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) * xh[l];
      sub[is + 2] += ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) * xh[l + 32];
      sub[is + 4] += ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) * xh[l + 64];
      sub[is + 6] += ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) * xh[l + 96];
    }
  }
  int32_t total = 0;
  for (int j = 0; j < 16; ++j) total += b.scales[j] * sub[j];
  return total;
}
#endif

HWY_INLINE uint32_t LoadQh(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);  // little-endian hosts only (x86, AArch64)
  return v;
}

// ---- row dots: the shared float accumulation (the determinism contract lives here) ----

HWY_INLINE uint32_t QhOf(const BlockQ5_0& b) { return LoadQh(b.qh); }
HWY_INLINE uint32_t QhOf(const BlockQ5_1& b) { return LoadQh(b.qh); }

// Σ q_w·q_x of one 32-block (exact), per weight block type.
HWY_INLINE int32_t Idot(const BlockQ8_0& b, const ActQ8& a) { return IdotQ8(b.qs, a.qs); }
HWY_INLINE int32_t Idot(const BlockQ4_0& b, const ActQ8& a) { return IdotQ4(b.qs, a.qs); }
HWY_INLINE int32_t Idot(const BlockQ4_1& b, const ActQ8& a) { return IdotQ4(b.qs, a.qs); }
HWY_INLINE int32_t Idot(const BlockQ5_0& b, const ActQ8& a) { return IdotQ5(b.qs, QhOf(b), a.qs); }
HWY_INLINE int32_t Idot(const BlockQ5_1& b, const ActQ8& a) { return IdotQ5(b.qs, QhOf(b), a.qs); }
#if EG_QK_X86
HWY_INLINE __m256i Vdot(const BlockQ8_0& b, const ActQ8& a) { return VdotQ8(b.qs, a.qs); }
HWY_INLINE __m256i Vdot(const BlockQ4_0& b, const ActQ8& a) { return VdotQ4(b.qs, a.qs); }
HWY_INLINE __m256i Vdot(const BlockQ4_1& b, const ActQ8& a) { return VdotQ4(b.qs, a.qs); }
HWY_INLINE __m256i Vdot(const BlockQ5_0& b, const ActQ8& a) { return VdotQ5(b.qs, QhOf(b), a.qs); }
HWY_INLINE __m256i Vdot(const BlockQ5_1& b, const ActQ8& a) { return VdotQ5(b.qs, QhOf(b), a.qs); }
#endif

// One block's contribution, in the canonical float order (quant_kernels.h). Q8_0 and Q4_0 (the
// types with a packed layout, packed.h) use one fused multiply-add chain over the blocks.
template <typename B>
constexpr bool kFmaChain = std::is_same_v<B, BlockQ8_0> || std::is_same_v<B, BlockQ4_0>;
HWY_INLINE float Accum(float acc, const BlockQ8_0& b, const ActQ8& a, int32_t is) {
  return std::fma(H2F(b.d) * a.d, static_cast<float>(is), acc);
}
HWY_INLINE float Accum(float acc, const BlockQ4_0& b, const ActQ8& a, int32_t is) {
  return std::fma(H2F(b.d) * a.d, static_cast<float>(is - 8 * a.s), acc);
}
HWY_INLINE float Accum(float acc, const BlockQ5_0& b, const ActQ8& a, int32_t is) {
  return acc + (H2F(b.d) * a.d) * static_cast<float>(is - 16 * a.s);
}
template <typename B>  // Q4_1, Q5_1: x = d·q + m
HWY_INLINE float AccumDM(float acc, const B& b, const ActQ8& a, int32_t is) {
  const float t1 = (H2F(b.d) * a.d) * static_cast<float>(is);
  const float t2 = (H2F(b.m) * a.d) * static_cast<float>(a.s);
  return acc + (t1 + t2);
}
HWY_INLINE float Accum(float acc, const BlockQ4_1& b, const ActQ8& a, int32_t is) {
  return AccumDM(acc, b, a, is);
}
HWY_INLINE float Accum(float acc, const BlockQ5_1& b, const ActQ8& a, int32_t is) {
  return AccumDM(acc, b, a, is);
}

#if EG_QK_X86
// Four blocks' Accum at once (lane k = block k); is: integer sums, sx: Σ q_x of each block.
template <typename B>
HWY_INLINE __m128 AccumV(__m128 acc, const B* b, __m128 dw, __m128 dx, __m128i is, __m128i sx) {
  if constexpr (std::is_same_v<B, BlockQ8_0>) {
    return _mm_add_ps(acc, _mm_mul_ps(_mm_mul_ps(dw, dx), _mm_cvtepi32_ps(is)));
  } else if constexpr (std::is_same_v<B, BlockQ4_0> || std::is_same_v<B, BlockQ5_0>) {
    const int shift = std::is_same_v<B, BlockQ4_0> ? 3 : 4;  // −8·s or −16·s
    const __m128i isum = _mm_sub_epi32(is, _mm_slli_epi32(sx, shift));
    return _mm_add_ps(acc, _mm_mul_ps(_mm_mul_ps(dw, dx), _mm_cvtepi32_ps(isum)));
  } else {  // Q4_1, Q5_1
    const __m128 mw = _mm_cvtph_ps(_mm_setr_epi16(static_cast<int16_t>(b[0].m), static_cast<int16_t>(b[1].m),
                                                  static_cast<int16_t>(b[2].m), static_cast<int16_t>(b[3].m), 0, 0, 0, 0));
    const __m128 t1 = _mm_mul_ps(_mm_mul_ps(dw, dx), _mm_cvtepi32_ps(is));
    const __m128 t2 = _mm_mul_ps(_mm_mul_ps(mw, dx), _mm_cvtepi32_ps(sx));
    return _mm_add_ps(acc, _mm_add_ps(t1, t2));
  }
}
#endif

#if EG_QK_X86
// Weight codes of a 32-block as 32 bytes (Q8_0: signed int8; others: unsigned 0..31).
HWY_INLINE __m256i Codes(const BlockQ8_0& b) { return Load32(b.qs); }
HWY_INLINE __m256i Codes(const BlockQ4_0& b) { return Nibbles(b.qs); }
HWY_INLINE __m256i Codes(const BlockQ4_1& b) { return Nibbles(b.qs); }
HWY_INLINE __m256i Codes(const BlockQ5_0& b) { return _mm256_or_si256(Nibbles(b.qs), HighBits(QhOf(b))); }
HWY_INLINE __m256i Codes(const BlockQ5_1& b) { return _mm256_or_si256(Nibbles(b.qs), HighBits(QhOf(b))); }
template <typename B>
HWY_INLINE __m256i VdotCodes(__m256i c, const int8_t* x) {
  if constexpr (std::is_same_v<B, BlockQ8_0>) {
    return DotU8S8(_mm256_sign_epi8(c, c), _mm256_sign_epi8(Load32(x), c));
  } else {
    return DotU8S8(c, Load32(x));
  }
}
HWY_INLINE __m128 F16x4(uint16_t a, uint16_t b, uint16_t c, uint16_t d) {
  return _mm_cvtph_ps(_mm_setr_epi16(static_cast<int16_t>(a), static_cast<int16_t>(b),
                                     static_cast<int16_t>(c), static_cast<int16_t>(d), 0, 0, 0, 0));
}
#endif

// Row dots of one weight row with ntok (1..4) activation rows over nb 32-blocks. Q8_0 / Q4_0: one
// fma chain per token over the blocks in order (as the packed kernels, packed.h). Others: block
// i is accumulated into acc[i % 4] (four independent float chains, so the adds pipeline), and
// the result is (acc0 + acc1) + (acc2 + acc3): a fixed order that depends only on K. Every
// token's operations are the same whatever ntok is (ntok only shares the weight unpacking), so
// out[j] is bit-identical to the ntok = 1 call. x86 reduces 4 blocks' integer sums together.
template <typename B>
void DotLegacyN(const void* w, const ActQ8* const* acts, int ntok, int64_t nb, float* out) {
  const B* b = static_cast<const B*>(w);
  float acc[4][4] = {};
  int64_t i0 = 0;
#if EG_QK_X86
  __m128 accv[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
  for (; i0 + 4 <= nb; i0 += 4) {
    const B* bb = b + i0;
    const __m256i c0 = Codes(bb[0]), c1 = Codes(bb[1]), c2 = Codes(bb[2]), c3 = Codes(bb[3]);
    const __m128 dw = F16x4(bb[0].d, bb[1].d, bb[2].d, bb[3].d);
    for (int j = 0; j < ntok; ++j) {
      const ActQ8* a = acts[j] + i0;
      const __m128i is = HSum4(VdotCodes<B>(c0, a[0].qs), VdotCodes<B>(c1, a[1].qs),
                               VdotCodes<B>(c2, a[2].qs), VdotCodes<B>(c3, a[3].qs));
      const __m128 dx = _mm_setr_ps(a[0].d, a[1].d, a[2].d, a[3].d);
      const __m128i sx = _mm_setr_epi32(a[0].s, a[1].s, a[2].s, a[3].s);
      if constexpr (kFmaChain<B>) {  // the four blocks' terms, then one fma chain in block order
        __m128i isum = is;
        if constexpr (std::is_same_v<B, BlockQ4_0>) isum = _mm_sub_epi32(is, _mm_slli_epi32(sx, 3));  // −8·s
        alignas(16) float p[4], f[4];
        _mm_store_ps(p, _mm_mul_ps(dw, dx));
        _mm_store_ps(f, _mm_cvtepi32_ps(isum));
        float& c = acc[j][0];
        c = std::fma(p[0], f[0], c);
        c = std::fma(p[1], f[1], c);
        c = std::fma(p[2], f[2], c);
        c = std::fma(p[3], f[3], c);
      } else {
        accv[j] = AccumV<B>(accv[j], bb, dw, dx, is, sx);
      }
    }
  }
  if constexpr (!kFmaChain<B>)
    for (int j = 0; j < ntok; ++j) _mm_storeu_ps(acc[j], accv[j]);
#endif
  for (int j = 0; j < ntok; ++j) {
    const ActQ8* a = acts[j];
    if constexpr (kFmaChain<B>) {
      for (int64_t i = i0; i < nb; ++i) acc[j][0] = Accum(acc[j][0], b[i], a[i], Idot(b[i], a[i]));
      out[j] = acc[j][0];
    } else {
      for (int64_t i = i0; i < nb; ++i) acc[j][i & 3] = Accum(acc[j][i & 3], b[i], a[i], Idot(b[i], a[i]));
      out[j] = (acc[j][0] + acc[j][1]) + (acc[j][2] + acc[j][3]);
    }
  }
}

// EG_Q4_G128 with ntok (1..4) activation rows: per token, sub-block s of every 128-group goes to
// acc[s] (term (d·d_x)·isum + (m·d_x)·Σq_x), result (acc0 + acc1) + (acc2 + acc3); x86 computes
// the four lanes at once (the same IEEE operations per lane) and unpacks each group once for all
// tokens.
void DotG128N(const void* w, const ActQ8* const* acts, int ntok, int64_t nb, float* out) {
  const auto* b = static_cast<const BlockEGQ4G128*>(w);
  float acc[4][4] = {};
#if EG_QK_X86
  __m128 accv[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
  for (int64_t g = 0; g < nb / 4; ++g) {
    const __m128 d = _mm_set1_ps(H2F(b[g].d)), m = _mm_set1_ps(H2F(b[g].m));
    const __m256i c0 = Nibbles(b[g].qs), c1 = Nibbles(b[g].qs + 16);
    const __m256i c2 = Nibbles(b[g].qs + 32), c3 = Nibbles(b[g].qs + 48);
    for (int j = 0; j < ntok; ++j) {
      const ActQ8* x = acts[j] + 4 * g;
      const __m128i is = HSum4(DotU8S8(c0, Load32(x[0].qs)), DotU8S8(c1, Load32(x[1].qs)),
                               DotU8S8(c2, Load32(x[2].qs)), DotU8S8(c3, Load32(x[3].qs)));
      const __m128 dx = _mm_setr_ps(x[0].d, x[1].d, x[2].d, x[3].d);
      const __m128i sx = _mm_setr_epi32(x[0].s, x[1].s, x[2].s, x[3].s);
      const __m128 t1 = _mm_mul_ps(_mm_mul_ps(d, dx), _mm_cvtepi32_ps(is));
      const __m128 t2 = _mm_mul_ps(_mm_mul_ps(m, dx), _mm_cvtepi32_ps(sx));
      accv[j] = _mm_add_ps(accv[j], _mm_add_ps(t1, t2));
    }
  }
  for (int j = 0; j < ntok; ++j) _mm_storeu_ps(acc[j], accv[j]);
#else
  for (int64_t g = 0; g < nb / 4; ++g) {
    const float d = H2F(b[g].d), m = H2F(b[g].m);
    for (int j = 0; j < ntok; ++j) {
      const ActQ8* x = acts[j] + 4 * g;
      for (int s = 0; s < 4; ++s) {
        const int32_t is = IdotQ4(b[g].qs + 16 * s, x[s].qs);
        const float t1 = (d * x[s].d) * static_cast<float>(is);
        const float t2 = (m * x[s].d) * static_cast<float>(x[s].s);
        acc[j][s] = acc[j][s] + (t1 + t2);
      }
    }
  }
#endif
  for (int j = 0; j < ntok; ++j) out[j] = (acc[j][0] + acc[j][1]) + (acc[j][2] + acc[j][3]);
}

// Decode (one token) K-quant row dots: the same float operations as the N versions below.
template <bool kQ5>
float DotQ45K(const void* w, const BlockQ8_K* a, int64_t nb) {
  using B = std::conditional_t<kQ5, BlockQ5_K, BlockQ4_K>;
  const auto* b = static_cast<const B*>(w);
  float acc = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) k_scale_min(j, b[i].scales, &sc[j], &mn[j]);
    const uint8_t* hb = nullptr;
    if constexpr (kQ5) hb = b[i].qh;
    const int32_t is = IdotQ45K(b[i].qs, hb, a[i].qs, sc);
    int32_t ms = 0;
    for (int j = 0; j < 8; ++j) ms += mn[j] * (a[i].bsums[2 * j] + a[i].bsums[2 * j + 1]);
    const float t1 = (H2F(b[i].d) * a[i].d) * static_cast<float>(is);
    const float t2 = (H2F(b[i].dmin) * a[i].d) * static_cast<float>(ms);
    acc += t1 - t2;
  }
  return acc;
}
float DotQ6K(const void* w, const BlockQ8_K* a, int64_t nb) {
  const auto* b = static_cast<const BlockQ6_K*>(w);
  float acc = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    int32_t off = 0;
    for (int j = 0; j < 16; ++j) off += b[i].scales[j] * a[i].bsums[j];
    const int32_t is = IdotQ6K(b[i], a[i].qs) - 32 * off;
    acc += (H2F(b[i].d) * a[i].d) * static_cast<float>(is);
  }
  return acc;
}

// K-quant row dots with ntok (1..4) Q8_K activation rows: one float chain per token over the
// 256-blocks; per token the same operations whatever ntok is (x86 shares the unpacking).
template <bool kQ5>
void DotQ45KN(const void* w, const BlockQ8_K* const* acts, int ntok, int64_t nb, float* out) {
  using B = std::conditional_t<kQ5, BlockQ5_K, BlockQ4_K>;
  const auto* b = static_cast<const B*>(w);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t i = 0; i < nb; ++i) {
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) k_scale_min(j, b[i].scales, &sc[j], &mn[j]);
    const uint8_t* hb = nullptr;
    if constexpr (kQ5) hb = b[i].qh;
    const float d = H2F(b[i].d), dmin = H2F(b[i].dmin);
#if EG_QK_X86
    KCodes u;
    UnpackQ45K(b[i].qs, hb, sc, &u);
#endif
    for (int j = 0; j < ntok; ++j) {
      const BlockQ8_K& a = acts[j][i];
#if EG_QK_X86
      const int32_t is = IdotKCodes(u, a.qs);
#else
      const int32_t is = IdotQ45K(b[i].qs, hb, a.qs, sc);
#endif
      int32_t ms = 0;
      for (int k = 0; k < 8; ++k) ms += mn[k] * (a.bsums[2 * k] + a.bsums[2 * k + 1]);
      const float t1 = (d * a.d) * static_cast<float>(is);
      const float t2 = (dmin * a.d) * static_cast<float>(ms);
      acc[j] += t1 - t2;
    }
  }
  for (int j = 0; j < ntok; ++j) out[j] = acc[j];
}

void DotQ6KN(const void* w, const BlockQ8_K* const* acts, int ntok, int64_t nb, float* out) {
  const auto* b = static_cast<const BlockQ6_K*>(w);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t i = 0; i < nb; ++i) {
    const float d = H2F(b[i].d);
#if EG_QK_X86
    KCodes u;
    UnpackQ6K(b[i], &u);
#endif
    for (int j = 0; j < ntok; ++j) {
      const BlockQ8_K& a = acts[j][i];
      int32_t off = 0;
      for (int k = 0; k < 16; ++k) off += b[i].scales[k] * a.bsums[k];
#if EG_QK_X86
      const int32_t is = IdotKCodes(u, a.qs) - 32 * off;
#else
      const int32_t is = IdotQ6K(b[i], a.qs) - 32 * off;
#endif
      acc[j] += (d * a.d) * static_cast<float>(is);
    }
  }
  for (int j = 0; j < ntok; ++j) out[j] = acc[j];
}

// Row dots of one weight row with ntok ≤ 4 activation rows (out[j] for acts[j]).
using RowDotN = void (*)(const void* w, const void* const* acts, int ntok, int64_t nb, float* out);

void G128(const void* w, const void* const* acts, int ntok, int64_t nb, float* out) {
  DotG128N(w, reinterpret_cast<const ActQ8* const*>(acts), ntok, nb, out);
}
template <typename B>
void Legacy(const void* w, const void* const* acts, int ntok, int64_t nb, float* out) {
  DotLegacyN<B>(w, reinterpret_cast<const ActQ8* const*>(acts), ntok, nb, out);
}
template <void (*F)(const void*, const BlockQ8_K* const*, int, int64_t, float*),
          float (*F1)(const void*, const BlockQ8_K*, int64_t)>
void KQuant(const void* w, const void* const* acts, int ntok, int64_t nb, float* out) {
  if (ntok == 1) {
    out[0] = F1(w, static_cast<const BlockQ8_K*>(acts[0]), nb);
  } else {
    F(w, reinterpret_cast<const BlockQ8_K* const*>(acts), ntok, nb, out);
  }
}

// The row-dot function of weight type t and the number of activation blocks per row of K.
RowDotN Pick(DType t, int64_t K, int64_t* nb) {
  *nb = K / 32;
  switch (t) {
    case DType::Q8_0: return &Legacy<BlockQ8_0>;
    case DType::Q4_0: return &Legacy<BlockQ4_0>;
    case DType::Q4_1: return &Legacy<BlockQ4_1>;
    case DType::Q5_0: return &Legacy<BlockQ5_0>;
    case DType::Q5_1: return &Legacy<BlockQ5_1>;
    case DType::EG_Q4_G128: return &G128;
    default: break;
  }
  *nb = K / 256;
  switch (t) {
    case DType::Q4_K: return &KQuant<DotQ45KN<false>, DotQ45K<false>>;
    case DType::Q5_K: return &KQuant<DotQ45KN<true>, DotQ45K<true>>;
    case DType::Q6_K: return &KQuant<DotQ6KN, DotQ6K>;
    default: return nullptr;
  }
}

float QDot(DType t, const void* wrow, const void* act, int64_t K) {
  int64_t nb;
  const RowDotN f = Pick(t, K, &nb);
  float out = 0.0f;
  if (f) f(wrow, &act, 1, nb, &out);
  return out;
}

void QGemm(DType t, const void* W, size_t w_row_bytes, int64_t n0, int64_t n1, const void* acts,
           size_t a_row_bytes, int64_t T, int64_t K, float* y, int64_t ldy) {
  int64_t nb;
  const RowDotN f = Pick(t, K, &nb);
  if (!f) return;
  const auto* wb = static_cast<const uint8_t*>(W);
  const auto* ab = static_cast<const uint8_t*>(acts);
  constexpr int64_t kTokTile = 16;  // activation tile stays in L1/L2 while weight rows stream
  for (int64_t t0 = 0; t0 < T; t0 += kTokTile) {
    const int64_t t1 = std::min(T, t0 + kTokTile);
    for (int64_t n = n0; n < n1; ++n) {
      const void* wrow = wb + static_cast<size_t>(n) * w_row_bytes;
      for (int64_t t = t0; t < t1; t += 4) {  // 4 tokens share one unpacking of the weight row
        const int ntok = static_cast<int>(std::min<int64_t>(4, t1 - t));
        const void* a4[4];
        for (int j = 0; j < ntok; ++j) a4[j] = ab + static_cast<size_t>(t + j) * a_row_bytes;
        float out[4];
        f(wrow, a4, ntok, nb, out);
        for (int j = 0; j < ntok; ++j) y[(t + j) * ldy + n] = out[j];
      }
    }
  }
}

// ActQ8 rows: per block of 32, d = amax/127, q = round-to-nearest-even(x·(1/d)) clamped to ±127,
// s = Σq: the same IEEE operations as the scalar definition (quant_kernels.h), lane by lane.
void QuantizeActQ8(const float* HWY_RESTRICT x, int64_t nb, ActQ8* HWY_RESTRICT a) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::CappedTag<float, 16> d;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::Rebind<int8_t, decltype(d)> d8;
  const size_t N = hn::Lanes(d);
  const auto lo = hn::Set(di, -127), hi = hn::Set(di, 127);
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    auto m = hn::Zero(d);
    for (size_t i = 0; i < 32; i += N) m = hn::Max(m, hn::Abs(hn::LoadU(d, x + i)));
    const float amax = hn::GetLane(hn::MaxOfLanes(d, m));
    const float dd = amax / 127.0f;
    const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
    const auto vid = hn::Set(d, id);
    auto sum = hn::Zero(di);
    for (size_t i = 0; i < 32; i += N) {
      const auto q = hn::Min(hn::Max(hn::NearestInt(hn::Mul(hn::LoadU(d, x + i), vid)), lo), hi);
      sum = hn::Add(sum, q);
      hn::StoreU(hn::DemoteTo(d8, q), d8, a[b].qs + i);
    }
    a[b].d = dd;
    a[b].s = hn::GetLane(hn::SumOfLanes(di, sum));
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace eg::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace eg::cpu {
HWY_EXPORT(QDot);
HWY_EXPORT(QGemm);
HWY_EXPORT(QuantizeActQ8);

bool qgemm_supports(DType t) { return is_quantized(t) && t != DType::Q8_K; }

size_t act_row_bytes(DType w, int64_t K) {
  switch (w) {
    case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
      return static_cast<size_t>(K / 256) * sizeof(quant::BlockQ8_K);
    default:
      return static_cast<size_t>(K / 32) * sizeof(ActQ8);
  }
}

void quantize_act_row(DType w, const float* x, int64_t K, void* out) {
  if (w == DType::Q4_K || w == DType::Q5_K || w == DType::Q6_K) {
    quant::quantize_q8_k(x, K, static_cast<quant::BlockQ8_K*>(out));
    return;
  }
  HWY_DYNAMIC_DISPATCH(QuantizeActQ8)(x, K / 32, static_cast<ActQ8*>(out));
}

void quantize_act_row_reference(const float* x, int64_t K, ActQ8* a) {
  for (int64_t b = 0; b < K / 32; ++b, x += 32) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int32_t s = 0;
    for (int i = 0; i < 32; ++i) {
      const int q = std::clamp(static_cast<int>(std::nearbyint(x[i] * id)), -127, 127);
      a[b].qs[i] = static_cast<int8_t>(q);
      s += q;
    }
    a[b].d = d;
    a[b].s = s;
  }
}

float qdot(DType w, const void* wrow, const void* act, int64_t K) {
  return HWY_DYNAMIC_DISPATCH(QDot)(w, wrow, act, K);
}

void qgemm(DType w, const void* W, size_t w_row_bytes, int64_t n0, int64_t n1, const void* acts,
           size_t a_row_bytes, int64_t T, int64_t K, float* y, int64_t ldy) {
  HWY_DYNAMIC_DISPATCH(QGemm)(w, W, w_row_bytes, n0, n1, acts, a_row_bytes, T, K, y, ldy);
}
}  // namespace eg::cpu
#endif
