// EG_Q4_G128: 4-bit asymmetric, one f16 scale d and one f16 offset m per 128 elements
// (x = d·q + m, q ∈ 0..15); nibble order in blocks.h. Quantization: weighted least-squares scale
// search (fit.h) over the group, then re-rounding against the stored f16 d and m.
#include <algorithm>
#include <cmath>

#include "quant/fit.h"
#include "quant/quant.h"

namespace eg::quant {

void quantize_eg_q4_g128(const float* x, int64_t n, BlockEGQ4G128* y) {
  float w[128];
  uint8_t L[128];
  for (int64_t b = 0; b < n / 128; ++b, x += 128) {
    float sum_x2 = 0.0f;
    for (int i = 0; i < 128; ++i) sum_x2 += x[i] * x[i];
    const float av_x = std::sqrt(sum_x2 / 128.0f);
    for (int i = 0; i < 128; ++i) w[i] = av_x + std::fabs(x[i]);
    float off;
    const float scale = fit_asymmetric(x, w, 128, 15, /*offset_le_zero=*/false, L, &off);
    y[b].d = f32_to_f16(scale);
    y[b].m = f32_to_f16(off);
    const float d = f16_to_f32(y[b].d), m = f16_to_f32(y[b].m);
    for (int i = 0; i < 128; ++i) {
      const int l = d != 0.0f ? round_int((x[i] - m) / d) : 0;
      L[i] = static_cast<uint8_t>(std::clamp(l, 0, 15));
    }
    for (int s = 0; s < 4; ++s) {
      for (int j = 0; j < 16; ++j) {
        y[b].qs[16 * s + j] = static_cast<uint8_t>(L[32 * s + j] | (L[32 * s + 16 + j] << 4));
      }
    }
  }
}

void dequantize_eg_q4_g128(const BlockEGQ4G128* x, int64_t n, float* y) {
  for (int64_t b = 0; b < n / 128; ++b, y += 128) {
    const float d = f16_to_f32(x[b].d), m = f16_to_f32(x[b].m);
    for (int s = 0; s < 4; ++s) {
      for (int j = 0; j < 16; ++j) {
        const uint8_t q = x[b].qs[16 * s + j];
        y[32 * s + j] = static_cast<float>(q & 0xF) * d + m;
        y[32 * s + 16 + j] = static_cast<float>(q >> 4) * d + m;
      }
    }
  }
}

}  // namespace eg::quant
