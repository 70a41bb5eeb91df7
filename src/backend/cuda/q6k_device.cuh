// Device helper of the Q6_K layout (q6k.h): element e < 256 of one BlockQ6_K (quant/blocks.h),
// dequantized as quant::dequantize_q6_k does it, (d·sc)·(q − 32) in f32, bit for bit.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

namespace eg::cuda {

constexpr int kQ6KBlockBytes = 210;  // ql[128] qh[64] scales[16] d (f16)

__device__ __forceinline__ float q6k_value(const uint8_t* blk, int e) {
  const int h = e >> 7, r = e & 127, g = r >> 5, l = r & 31;
  const uint8_t qlb = blk[64 * h + l + 32 * (g & 1)];
  const uint8_t qhb = blk[128 + 32 * h + l];
  const int lo = g < 2 ? (qlb & 0xF) : (qlb >> 4);
  const int q = (lo | (((qhb >> (2 * g)) & 3) << 4)) - 32;
  const int8_t sc = static_cast<int8_t>(blk[192 + 8 * h + (l >> 4) + 2 * g]);
  const uint16_t db = static_cast<uint16_t>(blk[208] | (blk[209] << 8));
  const float d = __half2float(__ushort_as_half(db));
  return __fmul_rn(__fmul_rn(d, static_cast<float>(sc)), static_cast<float>(q));
}

}  // namespace eg::cuda
