// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1: llama.cpp's reference quantization rules (ggml-quants.c,
// quantize_row_*_ref), restated:
//   Q8_0: d = amax/127, q = round-half-away(x/d)            (roundf of x·(1/d))
//   Q4_0: m = the element of largest |x| (first one, sign kept), d = m/−8,
//         q = min(15, trunc(x·(1/d) + 8.5))
//   Q5_0: as Q4_0 with d = m/−16, q = min(31, trunc(x·(1/d) + 16.5))
//   Q4_1: d = (max−min)/15, stored min; q = min(15, trunc((x−min)·(1/d) + 0.5))
//   Q5_1: d = (max−min)/31; q = trunc((x−min)·(1/d) + 0.5) (no clamp; only 5 bits stored)
// with 1/d replaced by 0 when d == 0, d rounded to f16 only when stored (q uses the f32 d).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/quant.h"

namespace eg::quant {
namespace {

// The first element of largest magnitude, with its sign (ggml: "amax/max" loop, strict <).
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void min_max(const float* x, int n, float* mn, float* mx) {
  float lo = 3.402823466e+38f, hi = -3.402823466e+38f;
  for (int j = 0; j < n; ++j) {
    if (x[j] < lo) lo = x[j];
    if (x[j] > hi) hi = x[j];
  }
  *mn = lo;
  *mx = hi;
}

// C's float -> int8_t conversion as ggml relies on (truncation toward zero; in range here).
inline int trunc_i8(float v) { return static_cast<int8_t>(static_cast<int>(v)); }

}  // namespace

void quantize_q8_0(const float* x, int64_t n, BlockQ8_0* y) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    for (int j = 0; j < kQK; ++j) y[b].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

void quantize_q4_0(const float* x, int64_t n, BlockQ4_0* y) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    const float d = signed_absmax(x, kQK) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, trunc_i8(x[j] * id + 8.5f));
      const int q1 = std::min(15, trunc_i8(x[j + 16] * id + 8.5f));
      y[b].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
    }
  }
}

void quantize_q4_1(const float* x, int64_t n, BlockQ4_1* y) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float mn, mx;
    min_max(x, kQK, &mn, &mx);
    const float d = (mx - mn) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    y[b].m = f32_to_f16(mn);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, trunc_i8((x[j] - mn) * id + 0.5f));
      const int q1 = std::min(15, trunc_i8((x[j + 16] - mn) * id + 0.5f));
      y[b].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
    }
  }
}

void quantize_q5_0(const float* x, int64_t n, BlockQ5_0* y) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    const float d = signed_absmax(x, kQK) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(31, trunc_i8(x[j] * id + 16.5f));
      const int q1 = std::min(31, trunc_i8(x[j + 16] * id + 16.5f));
      y[b].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
    }
    for (int k = 0; k < 4; ++k) y[b].qh[k] = static_cast<uint8_t>(qh >> (8 * k));
  }
}

void quantize_q5_1(const float* x, int64_t n, BlockQ5_1* y) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float mn, mx;
    min_max(x, kQK, &mn, &mx);
    const float d = (mx - mn) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    y[b].m = f32_to_f16(mn);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = static_cast<uint8_t>(static_cast<int>((x[j] - mn) * id + 0.5f));
      const int q1 = static_cast<uint8_t>(static_cast<int>((x[j + 16] - mn) * id + 0.5f));
      y[b].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
    }
    for (int k = 0; k < 4; ++k) y[b].qh[k] = static_cast<uint8_t>(qh >> (8 * k));
  }
}

void dequantize_q8_0(const BlockQ8_0* x, int64_t n, float* y) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = f16_to_f32(x[b].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(x[b].qs[j]) * d;
  }
}

void dequantize_q4_0(const BlockQ4_0* x, int64_t n, float* y) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = f16_to_f32(x[b].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((x[b].qs[j] & 0xF) - 8) * d;
      y[j + 16] = static_cast<float>((x[b].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q4_1(const BlockQ4_1* x, int64_t n, float* y) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = f16_to_f32(x[b].d), m = f16_to_f32(x[b].m);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(x[b].qs[j] & 0xF) * d + m;
      y[j + 16] = static_cast<float>(x[b].qs[j] >> 4) * d + m;
    }
  }
}

namespace {
inline uint32_t load_qh(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
}  // namespace

void dequantize_q5_0(const BlockQ5_0* x, int64_t n, float* y) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = f16_to_f32(x[b].d);
    const uint32_t qh = load_qh(x[b].qh);
    for (int j = 0; j < 16; ++j) {
      const int q0 = (x[b].qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
      const int q1 = (x[b].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
      y[j] = static_cast<float>(q0 - 16) * d;
      y[j + 16] = static_cast<float>(q1 - 16) * d;
    }
  }
}

void dequantize_q5_1(const BlockQ5_1* x, int64_t n, float* y) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = f16_to_f32(x[b].d), m = f16_to_f32(x[b].m);
    const uint32_t qh = load_qh(x[b].qh);
    for (int j = 0; j < 16; ++j) {
      const int q0 = (x[b].qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
      const int q1 = (x[b].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
      y[j] = static_cast<float>(q0) * d + m;
      y[j + 16] = static_cast<float>(q1) * d + m;
    }
  }
}

}  // namespace eg::quant
