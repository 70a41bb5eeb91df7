// K/V row conversion and range checks (kv_store.h).
#include "kv/kv_store.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "core/dtype.h"
#include "core/warning.h"

namespace eg::kvstore {

size_t elem_bytes(KVType t) {
  switch (t) {
    case KVType::F16:
    case KVType::BF16: return 2;
    case KVType::F32: return 4;
    case KVType::INT8: return 1;
  }
  return 4;
}

namespace {

inline uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}


}  // namespace

// F16/BF16/F32: the stored exponent field is all ones (inf or NaN) iff adding one unit to it
// carries into the sign position, so OR-ing (exponent + 1 unit) over the row and testing that bit
// is the whole check: no compare or branch per value, fused into the conversion loop.
float store_row(KVType t, const float* x, int n, uint8_t* dst, bool& flag) {
  switch (t) {
    case KVType::F32: {
      uint32_t bad = 0;
      for (int i = 0; i < n; ++i) {
        const uint32_t b = bits_of(x[i]);
        std::memcpy(dst + 4 * static_cast<size_t>(i), &b, 4);
        bad |= (b & 0x7f800000u) + 0x00800000u;
      }
      flag |= (bad & 0x80000000u) != 0;
      return 1.0f;
    }
    case KVType::F16: {
      auto* d = reinterpret_cast<uint16_t*>(dst);
      uint32_t bad = 0;
      for (int i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(x[i]);
        d[i] = h;
        bad |= (h & 0x7c00u) + 0x0400u;
      }
      flag |= (bad & 0x8000u) != 0;
      return 1.0f;
    }
    case KVType::BF16: {
      auto* d = reinterpret_cast<uint16_t*>(dst);
      uint32_t bad = 0;
      for (int i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(x[i]);
        d[i] = h;
        bad |= (h & 0x7f80u) + 0x0080u;
      }
      flag |= (bad & 0x8000u) != 0;
      return 1.0f;
    }
    case KVType::INT8: {
      float amax = 0.0f;
      unsigned bad = 0;
      for (int i = 0; i < n; ++i) {
        const float a = std::fabs(x[i]);
        bad |= !(a <= std::numeric_limits<float>::max());  // NaN or inf
        amax = std::max(amax, a);
      }
      auto* d = reinterpret_cast<int8_t*>(dst);
      if (bad) {  // no finite scale represents the row: make it read back as NaN
        flag = true;
        std::memset(d, 0, n);
        return std::numeric_limits<float>::quiet_NaN();
      }
      const float scale = amax / 127.0f;
      if (scale == 0.0f) {
        std::memset(d, 0, n);
        return 0.0f;
      }
      const float inv = 1.0f / scale;
      for (int i = 0; i < n; ++i) {
        const float q = std::nearbyint(x[i] * inv);
        d[i] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
      }
      return scale;
    }
  }
  return 1.0f;
}

InputCheck check_inputs(KVType t, const float* x, size_t n, InputCheck acc) {
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      acc.non_finite = true;
      continue;
    }
    acc.max_finite = std::max(acc.max_finite, std::fabs(x[i]));
    if (t == KVType::F16) acc.overflow |= (f32_to_f16(x[i]) & 0x7c00u) == 0x7c00u;
    if (t == KVType::BF16) acc.overflow |= (f32_to_bf16(x[i]) & 0x7f80u) == 0x7f80u;
  }
  return acc;
}

KVType widened(KVType t) { return t == KVType::F16 ? KVType::BF16 : t; }

void f16_to_bf16_inplace(uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    const uint16_t b = f32_to_bf16(f16_to_f32(h));
    std::memcpy(p + 2 * i, &b, 2);
  }
}

void warn_widened(int layer, float magnitude, KVType from, KVType to) {
  if (!warning_first_time(WarningKind::KVF16Overflow)) return;
  char mag[32];
  std::snprintf(mag, sizeof mag, "%.4g", magnitude);
  warn(std::string("KV cache: layer ") + std::to_string(layer) + " produced a key/value of magnitude " + mag +
       ", beyond the " + kv_type_name(from) + " range (65504); that layer's pages are now stored as " +
       kv_type_name(to) + " (same memory, 8-bit mantissa). Any layer that overflows is switched the same "
       "way; this is reported once. KV type bf16 or f32 avoids the switch.");
}

void warn_non_finite(int layer, KVType t, bool overflow_without_remedy) {
  if (!warning_first_time(WarningKind::KVNonFinite)) return;
  if (overflow_without_remedy)
    warn(std::string("KV cache: layer ") + std::to_string(layer) + " produced a key/value beyond the " +
         kv_type_name(t) + " range; it is stored as infinity and the output may be meaningless (reported once)");
  else
    warn(std::string("KV cache: layer ") + std::to_string(layer) +
         " produced a NaN or infinite key/value (the model's activations are not finite); it is stored "
         "as such and the output is likely meaningless (reported once)");
}

}  // namespace eg::kvstore
