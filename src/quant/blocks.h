// Byte layouts of the block-quantized types (ggml's, ggml-common.h, plus edgegemma's EG_Q4_G128).
// Every struct is packed exactly as stored in a GGUF file (no padding); static_asserts below tie
// them to dtype_block_bytes. f16 fields are IEEE binary16 bit patterns (eg::f16_to_f32).
//
// Element order inside a block (the "value" of element i is what dequantize_row writes):
//   Q8_0  [d f16][qs int8 ×32]              x[i] = d · qs[i]
//   Q4_0  [d f16][qs 16 B]                  x[i] = d · (q[i] − 8); q[i] = qs[i] & 15 (i < 16),
//                                           qs[i−16] >> 4 (i ≥ 16)
//   Q4_1  [d f16][m f16][qs 16 B]           x[i] = d · q[i] + m   (nibbles as Q4_0)
//   Q5_0  [d f16][qh u32 LE][qs 16 B]       x[i] = d · (q[i] − 16); q[i] = nibble | bit i of qh << 4
//   Q5_1  [d f16][m f16][qh][qs]            x[i] = d · q[i] + m
//   Q4_K  256 = 8 sub-blocks of 32 with 6-bit scale sc_j and min m_j (packed in 12 B, see
//         k_scale_min): x = d·sc_j·q − dmin·m_j; chunk c (64 elems) uses qs[32c..32c+31]: low nibbles
//         for elements 64c+l (sub-block 2c), high nibbles for 64c+32+l (sub-block 2c+1).
//   Q5_K  as Q4_K plus qh[32]: element 64c+l takes bit 2c of qh[l], 64c+32+l bit 2c+1, as bit 4.
//   Q6_K  ql[128], qh[64], int8 scales[16], d: 16 sub-blocks of 16, x = d·sc_j·(q − 32), q 6 bit
//         (see dequantize_q6_k for the bit positions).
//   Q8_K  [d f32][qs int8 ×256][bsums int16 ×16]: x = d·qs; bsums[j] = Σ qs[16j..16j+15].
//   EG_Q4_G128 [d f16][m f16][qs 64 B]: 128 elements = 4 sub-blocks of 32, each 16 B of nibbles in
//         Q4_0's order (element 32s+i: low nibble of qs[16s+i] for i < 16, high nibble of
//         qs[16s+i−16] otherwise); x = d·q + m. Same layout as four Q4_1 blocks sharing one d/m,
//         so the kernels reuse the Q4_1 unpacking (this replaced the placeholder layout).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace eg::quant {

inline constexpr int kQK = 32;    // legacy block size
inline constexpr int kQKK = 256;  // K-quant super-block size

#pragma pack(push, 1)
struct BlockQ8_0 { uint16_t d; int8_t qs[32]; };
struct BlockQ4_0 { uint16_t d; uint8_t qs[16]; };
struct BlockQ4_1 { uint16_t d; uint16_t m; uint8_t qs[16]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };
struct BlockQ5_1 { uint16_t d; uint16_t m; uint8_t qh[4]; uint8_t qs[16]; };
struct BlockQ4_K { uint16_t d; uint16_t dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct BlockQ5_K { uint16_t d; uint16_t dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct BlockQ6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };
struct BlockQ8_K { float d; int8_t qs[256]; int16_t bsums[16]; };
struct BlockEGQ4G128 { uint16_t d; uint16_t m; uint8_t qs[64]; };
#pragma pack(pop)

static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292 && sizeof(BlockEGQ4G128) == 68);

/// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block from its 12 packed bytes
/// (ggml's get_scale_min_k4): j < 4: low 6 bits of bytes j / j+4; j ≥ 4: low/high nibble of byte
/// j+4 plus the top 2 bits of bytes j−4 / j as bits 4..5.
inline void k_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace eg::quant
