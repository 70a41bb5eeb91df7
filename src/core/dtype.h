// Element types of tensors and the scalar conversions between them.
//
// BF16: the upper 16 bits of an IEEE binary32 (conversion to f32 is exact).
// F16:  IEEE binary16 (conversion to f32 is exact; subnormals and inf/nan handled).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace eg {

enum class DType : uint8_t { F32, F16, BF16 };

/// Bytes per element.
inline size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 2; }

/// Name as written in safetensors headers ("F32", "F16", "BF16").
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
