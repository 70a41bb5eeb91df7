// AMX-INT8 prefill kernel for the packed Q4_0x16 / Q8_0x16 layouts (packed.h), for T >= 16
// tokens on CPUs with Intel AMX (Sapphire Rapids and later). Opt-in (EDGEGEMMA_AMX=1): exact, but
// measured no faster than the VNNI kernel on the development Xeon (docs/performance.md,
// 2026-12-06): the per-block f32 epilogue, not the tile products, bounds it.
// Source followed: Intel 64 and IA-32 Architectures Software Developer's Manual, vol. 1 ch. 18 ("Intel AMX") and vol. 2 (LDTILECFG,
// TILELOADD, TILESTORED, TILEZERO, TDPBSSD); Linux Documentation/arch/x86/xstate.rst for the
// ARCH_REQ_XCOMP_PERM permission a process needs before its first tile instruction.
//
// One tile product per 32-element block: C[16 tokens × 16 rows] (int32) = A[16 tokens × 32 s8
// activation codes] · B[32 × 16 rows of s8 weight codes], B in the "VNNI" tile layout (8 tile rows
// of 64 bytes; tile row kk holds, for weight row n, the codes of k = 4kk .. 4kk+3 at bytes 4n..4n+3:
// exactly the chunk order of the packed layouts). The weight codes are made signed once per group
// into a per-thread buffer (Q4_0: q − 8 from the nibbles; Q8_0: (q + 128) ^ 0x80 = q), so TDPBSSD
// gives the exact Σ q_w·q_x of packed.h with no offset term (the int32 sum cannot overflow:
// 32 × 128 × 127 < 2^31). The tile is stored, and per token row the AVX-512 epilogue does
// acc = fma(d_w·d_x, float(isum), acc), block after block in order from 0: the arithmetic of
// packed.h, so the results are bit-identical to the VNNI kernel and the scalar reference for any T,
// token tiling or thread count.
//
// Loop order per call: for each pair of 16-row groups, their signed codes (2 × nb × 512 bytes, L1/L2
// resident), then every pair of full 16-token tiles streams them with its activation rows: per
// block four products (2 token tiles × 2 groups, each A and B tile used twice), so the TMUL unit
// is kept busy (one product after another on one tile set measured 2-4× slower on a Xeon with AMX:
// the unit's latency, not its rate); the 4 × 16 × 16 f32 accumulators live in L1. Tokens past the
// last full 16-token tile are left to the VNNI kernel (packed_avx512.cpp).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/packed.h"

#if defined(__x86_64__) && defined(__linux__)
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define EG_AMX_EPILOGUE __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
// The tile instructions as inline assembly (binutils and clang's assembler know them), each with a
// memory clobber so the compiler keeps the ordinary stores of the code buffer and the loads of the
// stored C tile on the right side of them.
#define EG_TILE_LOAD(t, base, stride) \
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(base), "r"(static_cast<long>(stride)) : "memory")
#define EG_TILE_STORE(t, base, stride) \
  __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(base), "r"(static_cast<long>(stride)) : "memory")
#define EG_TILE_ZERO(t) __asm__ volatile("tilezero %%tmm" #t ::: "memory")
#define EG_TILE_DPBSSD(c, a, b) __asm__ volatile("tdpbssd %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::: "memory")
#endif

namespace eg::cpu {

#if defined(__x86_64__) && defined(__linux__)
namespace {

constexpr size_t kCodeBytes = 512;
constexpr size_t kAmxAhead = 4;  // blocks ahead for the activation-row prefetch  // one block column's signed codes: 8 tile rows × 64 bytes

// The 64-byte LDTILECFG operand, palette 1: tiles 0-3 = C (16 rows × 64 bytes of int32),
// 4, 5 = A (16 token rows × 32 code bytes), 6, 7 = B (8 rows × 64 bytes).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 32, 32, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 8, 8};
};
static_assert(sizeof(TileConfig) == 64);

bool cpu_has_amx_int8() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  const bool tile = (d >> 24) & 1, int8 = (d >> 25) & 1;
  const bool avx512 = ((b >> 16) & 1) && ((b >> 30) & 1) && ((b >> 31) & 1) && ((b >> 17) & 1);  // F, BW, VL, DQ
  return tile && int8 && avx512;
}

// Asks Linux for the tile-data state (process-wide, once); false where the kernel refuses.
bool request_tile_permission() {
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

bool amx_enabled_by_env() {
  const char* e = std::getenv("EDGEGEMMA_AMX");
  return e != nullptr && std::strcmp(e, "1") == 0;
}

// The group's codes as signed bytes in the B-tile layout, block after block.
template <bool kQ4>
EG_AMX_EPILOGUE void signed_codes(const uint8_t* group, int64_t nb, int8_t* out) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8), flip = _mm512_set1_epi8(-128);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* q = group + static_cast<size_t>(b) * kPackColBytes<kQ4> + 32;
    int8_t* o = out + static_cast<size_t>(b) * kCodeBytes;
    if constexpr (kQ4) {
      for (int j = 0; j < 4; ++j) {  // tile row j: k = 4j..4j+3 (low nibbles); row 4+j: k = 16+4j.. (high)
        const __m512i v = _mm512_loadu_si512(q + 64 * j);
        _mm512_storeu_si512(o + 64 * j, _mm512_sub_epi8(_mm512_and_si512(v, m4), eight));
        _mm512_storeu_si512(o + 64 * (4 + j), _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), eight));
      }
    } else {
      for (int j = 0; j < 8; ++j)
        _mm512_storeu_si512(o + 64 * j, _mm512_xor_si512(_mm512_loadu_si512(q + 64 * j), flip));
    }
  }
}

// acc[m] = fma(d_w·d_x(m), float(c[m]), acc[m]) for the 16 token rows m of one stored C tile
// (acc: 16 rows of 16 floats in L1; col: the group's block column, whose first 32 bytes are the
// rows' f16 scales; dx: token 0's ActQ8::d of this block, the next token a_row_bytes further).
// kFirst: block 0, acc = fma(…, 0) (the chain's start), so acc need not be cleared first.
template <bool kFirst>
EG_AMX_EPILOGUE inline void epilogue(const int32_t* c, const uint8_t* col, const uint8_t* dx, size_t a_row_bytes,
                                     float* acc) {
  const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(col)));
#pragma GCC unroll 16
  for (int m = 0; m < 16; ++m) {
    float d;
    std::memcpy(&d, dx + static_cast<size_t>(m) * a_row_bytes, sizeof d);
    const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(d));
    const __m512 v = _mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * m));
    const __m512 prev = kFirst ? _mm512_setzero_ps() : _mm512_load_ps(acc + 16 * m);
    _mm512_store_ps(acc + 16 * m, _mm512_fmadd_ps(dd, v, prev));
  }
}

// NT (1 or 2) 16-token tiles × NG (1 or 2) 16-row groups over all nb blocks: per block, A tiles 4
// and 5 (the token tiles' codes), B tiles 6 and 7 (the groups' codes), C tile 2·tt + gg for token
// tile tt and group gg, so each A and B tile feeds two products that run back to back. groups[gg]:
// the packed group (for the scales); codes[gg]: its signed codes; a: token 0's ActQ8 row; y: token
// 0's output of group 0 (group 1 at y + 16).
template <bool kQ4, int NT, int NG>
EG_AMX_EPILOGUE void tile(const uint8_t* const* groups, const int8_t* const* codes, int64_t nb, const uint8_t* a,
                          size_t a_row_bytes, float* y, int64_t ldy) {
  // The stored C tiles and the accumulators in one frame, 4 KiB + 256 bytes apart: at exactly
  // 4 KiB (two separate 4 KiB arrays) every epilogue load of c aliased the store of acc before it
  // (the 4K-aliasing false dependency) and the kernel ran 2-3× slower.
  struct alignas(64) Scratch {
    int32_t c[4][256];
    float skew[64];
    float acc[4][256];
  } sc;
  auto& c = sc.c;
  auto& acc = sc.acc;
  constexpr size_t kAct = sizeof(ActQ8);
  const size_t qs = offsetof(ActQ8, qs), dx = offsetof(ActQ8, d);
  const uint8_t* a1 = a + 16 * a_row_bytes;
  for (int64_t b = 0; b < nb; ++b) {
    const size_t ao = static_cast<size_t>(b) * kAct, wo = static_cast<size_t>(b) * kCodeBytes;
    // A tile load gathers 16 rows a_row_bytes apart; from L2 it waits on each line in turn, so
    // the token rows of a later block are prefetched into L1 (the last blocks' prefetches reach
    // past the row: harmless, a prefetch never faults).
    for (int tt = 0; tt < NT; ++tt)
      for (int m = 0; m < 16; ++m)
        _mm_prefetch(reinterpret_cast<const char*>((tt == 0 ? a : a1) + m * a_row_bytes + ao + kAmxAhead * kAct + qs),
                     _MM_HINT_T0);
    EG_TILE_LOAD(4, a + ao + qs, a_row_bytes);
    EG_TILE_LOAD(6, codes[0] + wo, 64);
    EG_TILE_ZERO(0);
    EG_TILE_DPBSSD(0, 4, 6);
    if constexpr (NG == 2) {
      EG_TILE_LOAD(7, codes[1] + wo, 64);
      EG_TILE_ZERO(1);
      EG_TILE_DPBSSD(1, 4, 7);
    }
    if constexpr (NT == 2) {
      EG_TILE_LOAD(5, a1 + ao + qs, a_row_bytes);
      EG_TILE_ZERO(2);
      EG_TILE_DPBSSD(2, 5, 6);
      if constexpr (NG == 2) {
        EG_TILE_ZERO(3);
        EG_TILE_DPBSSD(3, 5, 7);
      }
    }
    EG_TILE_STORE(0, c[0], 64);
    if constexpr (NG == 2) EG_TILE_STORE(1, c[1], 64);
    if constexpr (NT == 2) EG_TILE_STORE(2, c[2], 64);
    if constexpr (NT == 2 && NG == 2) EG_TILE_STORE(3, c[3], 64);
    for (int tt = 0; tt < NT; ++tt)
      for (int gg = 0; gg < NG; ++gg) {
        const uint8_t* col = groups[gg] + static_cast<size_t>(b) * kPackColBytes<kQ4>;
        const uint8_t* d = (tt == 0 ? a : a1) + ao + dx;
        if (b == 0) {
          epilogue<true>(c[2 * tt + gg], col, d, a_row_bytes, acc[2 * tt + gg]);
        } else {
          epilogue<false>(c[2 * tt + gg], col, d, a_row_bytes, acc[2 * tt + gg]);
        }
      }
  }
  for (int tt = 0; tt < NT; ++tt)
    for (int gg = 0; gg < NG; ++gg)
      for (int m = 0; m < 16; ++m) {
        float* out = y + (16 * tt + m) * ldy + 16 * gg;
        const __m512 v = _mm512_load_ps(acc[2 * tt + gg] + 16 * m);
        _mm512_storeu_ps(out, v);
      }
}

template <bool kQ4>
void gemm(const void* packed, int64_t K, int64_t n0, int64_t n1, const void* acts, size_t a_row_bytes, int64_t T16,
          float* y, int64_t ldy) {
  const int64_t nb = K / 32;
  const size_t gs = static_cast<size_t>(nb) * kPackColBytes<kQ4>;
  const auto* base = static_cast<const uint8_t*>(packed);
  const auto* ab = static_cast<const uint8_t*>(acts);
  thread_local std::vector<int8_t> buffer;
  const size_t per_group = static_cast<size_t>(nb) * kCodeBytes;
  if (buffer.size() < 2 * per_group + 64) buffer.resize(2 * per_group + 64);
  auto* codes0 = reinterpret_cast<int8_t*>((reinterpret_cast<uintptr_t>(buffer.data()) + 63) & ~uintptr_t{63});
  static const TileConfig config;
  __asm__ volatile("ldtilecfg %0" ::"m"(config) : "memory");
  const int64_t g1 = n1 / kPackRows;
  for (int64_t g = n0 / kPackRows; g < g1; g += 2) {
    const int ng = g + 1 < g1 ? 2 : 1;
    const uint8_t* groups[2] = {base + static_cast<size_t>(g) * gs, base + static_cast<size_t>(g + ng - 1) * gs};
    const int8_t* codes[2] = {codes0, codes0 + per_group};
    for (int gg = 0; gg < ng; ++gg) signed_codes<kQ4>(groups[gg], nb, codes0 + gg * per_group);
    for (int64_t t0 = 0; t0 < T16; t0 += 32) {
      const uint8_t* a = ab + static_cast<size_t>(t0) * a_row_bytes;
      float* yt = y + t0 * ldy + g * kPackRows;
      const bool two = t0 + 32 <= T16;
      if (two && ng == 2) tile<kQ4, 2, 2>(groups, codes, nb, a, a_row_bytes, yt, ldy);
      else if (two) tile<kQ4, 2, 1>(groups, codes, nb, a, a_row_bytes, yt, ldy);
      else if (ng == 2) tile<kQ4, 1, 2>(groups, codes, nb, a, a_row_bytes, yt, ldy);
      else tile<kQ4, 1, 1>(groups, codes, nb, a, a_row_bytes, yt, ldy);
    }
  }
  __asm__ volatile("tilerelease" ::: "memory");
}

}  // namespace

bool packed_amx_supported() {
  static const bool ok = cpu_has_amx_int8() && request_tile_permission();
  return ok;
}

bool packed_amx_enabled() {
  static const bool on = amx_enabled_by_env() && packed_amx_supported();
  return on;
}

int64_t packed_gemm_amx(DType t, const void* packed, int64_t K, int64_t n0, int64_t n1, const void* acts,
                        size_t a_row_bytes, int64_t T, float* y, int64_t ldy) {
  if (T < 16 || (t != DType::Q4_0 && t != DType::Q8_0) || !packed_amx_supported()) return 0;
  const int64_t T16 = T / 16 * 16;
  if (t == DType::Q4_0) {
    gemm<true>(packed, K, n0, n1, acts, a_row_bytes, T16, y, ldy);
  } else {
    gemm<false>(packed, K, n0, n1, acts, a_row_bytes, T16, y, ldy);
  }
  return T16;
}

#else  // no AMX outside x86-64 Linux

bool packed_amx_supported() { return false; }
bool packed_amx_enabled() { return false; }

int64_t packed_gemm_amx(DType, const void*, int64_t, int64_t, int64_t, const void*, size_t, int64_t, float*, int64_t) {
  return 0;
}

#endif

}  // namespace eg::cpu
