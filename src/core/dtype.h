// Element types of tensors and the scalar conversions between them.
//
// BF16: the upper 16 bits of an IEEE binary32 (conversion to f32 is exact).
// F16:  IEEE binary16 (conversion to f32 is exact; subnormals and inf/nan handled).
// Block-quantized types (ggml's layouts, ggml-common.h; src/quant/ implements them): a row of n
// elements is n / block_elems blocks of block_bytes each, stored back to back. Q8_K is ggml's
// activation type for K-quant dot products (never stored in files by us). EG_Q4_G128 is edgegemma's
// own 4-bit extension with group size 128 (docs/quantization.md); only edgegemma loads it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace eg {

enum class DType : uint8_t {
  F32, F16, BF16,
  Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q8_K,
  EG_Q4_G128,
};

/// True for the block-quantized types.
inline bool is_quantized(DType t) { return t >= DType::Q8_0; }

/// Elements per block (1 for F32/F16/BF16, 32 for Q*_0/Q*_1, 256 for K-quants, 128 for EG_Q4_G128).
int64_t dtype_block_elems(DType t);
/// Bytes per block (for F32/F16/BF16: bytes per element).
size_t dtype_block_bytes(DType t);
/// Bytes of a row of n elements; n must be a multiple of dtype_block_elems(t) (checked by callers
/// that read files; see row_fits_blocks).
inline size_t dtype_row_bytes(DType t, int64_t n) {
  return static_cast<size_t>(n / dtype_block_elems(t)) * dtype_block_bytes(t);
}
inline bool row_fits_blocks(DType t, int64_t n) { return n % dtype_block_elems(t) == 0; }

/// Bytes per element of F32/F16/BF16 (not meaningful for block types: use dtype_row_bytes).
inline size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 2; }

/// Name: "F32", "F16", "BF16" (as in safetensors headers), "Q8_0", "Q4_K", ... (ggml's names),
/// "EG_Q4_G128".
const char* dtype_name(DType t);

/// Parses a safetensors dtype string; returns false for types we do not support.
bool parse_dtype(const std::string& s, DType* out);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// Round-to-nearest-even f32 -> bf16 (NaN kept quiet), as torch does.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

}  // namespace eg
