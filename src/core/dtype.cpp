#include "core/dtype.h"

#include <cmath>

namespace eg {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::Q8_0: return "Q8_0";
    case DType::Q4_0: return "Q4_0";
    case DType::Q4_1: return "Q4_1";
    case DType::Q5_0: return "Q5_0";
    case DType::Q5_1: return "Q5_1";
    case DType::Q4_K: return "Q4_K";
    case DType::Q5_K: return "Q5_K";
    case DType::Q6_K: return "Q6_K";
    case DType::Q8_K: return "Q8_K";
    case DType::EG_Q4_G128: return "EG_Q4_G128";
  }
  return "?";
}

int64_t dtype_block_elems(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: return 1;
    case DType::Q8_0: case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1:
      return 32;
    case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: case DType::Q8_K: return 256;
    case DType::EG_Q4_G128: return 128;
  }
  return 1;
}

size_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: case DType::BF16: return 2;
    case DType::Q8_0: return 2 + 32;            // f16 d, 32 × int8
    case DType::Q4_0: return 2 + 16;            // f16 d, 32 × 4 bit
    case DType::Q4_1: return 2 + 2 + 16;        // f16 d, f16 m, 32 × 4 bit
    case DType::Q5_0: return 2 + 4 + 16;        // f16 d, 32 high bits, 32 × 4 bit
    case DType::Q5_1: return 2 + 2 + 4 + 16;    // f16 d, f16 m, high bits, nibbles
    case DType::Q4_K: return 2 + 2 + 12 + 128;  // f16 d, f16 dmin, 12 B scales, 256 × 4 bit
    case DType::Q5_K: return 2 + 2 + 12 + 32 + 128;
    case DType::Q6_K: return 128 + 64 + 16 + 2; // ql, qh, int8 scales, f16 d
    case DType::Q8_K: return 4 + 256 + 32;      // f32 d, 256 × int8, 16 × int16 block sums
    case DType::EG_Q4_G128: return 2 + 2 + 64;  // f16 scale, f16 min, 128 × 4 bit
  }
  return 4;
}

bool parse_dtype(const std::string& s, DType* out) {
  if (s == "F32") { *out = DType::F32; return true; }
  if (s == "F16") { *out = DType::F16; return true; }
  if (s == "BF16") { *out = DType::BF16; return true; }
  return false;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: value = man * 2^-24
      float v = std::ldexp(static_cast<float>(man), -24);
      std::memcpy(&bits, &v, 4);
      bits |= sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return sign | 0x7e00u;          // NaN
  if (ax >= 0x477ff000u) return sign | 0x7c00u;         // overflow -> inf (65520 rounds up)
  if (ax < 0x38800000u) {                               // subnormal or zero in f16
    float v;
    std::memcpy(&v, &ax, 4);
    const float scaled = v * 16777216.0f;               // v / 2^-24, exact
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u) - (112u << 23);
  return sign | static_cast<uint16_t>(r >> 13);
}

}  // namespace eg
