#include "core/dtype.h"

#include <cmath>

namespace eg {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
  }
  return "?";
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
