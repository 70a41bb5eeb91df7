// K-quants (Q4_K, Q5_K, Q6_K) and Q8_K: dequantization exactly per ggml's layout (blocks.h);
// quantization by error-minimising scale search (fit.h), then the super-block's sub-block scales
// (and mins) are quantized to 6 bits (Q4_K/Q5_K) or int8 (Q6_K) and the elements re-rounded
// against the scales actually stored.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/fit.h"
#include "quant/quant.h"

namespace eg::quant {
namespace {

// Q4_K / Q5_K common part: 8 sub-blocks of 32 with nmax = 15 or 31. Writes d, dmin, the 12 scale
// bytes and L[256] (0..nmax).
void quantize_k_asym(const float* x, int nmax, uint16_t* d_out, uint16_t* dmin_out,
                     uint8_t* scales12, uint8_t* L) {
  float scales[8], mins[8], w[32];
  float sum_x2 = 0.0f;
  for (int i = 0; i < kQKK; ++i) sum_x2 += x[i] * x[i];
  const float av_x = std::sqrt(sum_x2 / kQKK);
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    for (int i = 0; i < 32; ++i) w[i] = av_x + std::fabs(xs[i]);  // emphasise large weights
    float off;
    scales[j] = fit_asymmetric(xs, w, 32, nmax, /*offset_le_zero=*/true, L + 32 * j, &off);
    mins[j] = -off;  // ≥ 0
  }
  const float max_scale = *std::max_element(scales, scales + 8);
  const float max_min = *std::max_element(mins, mins + 8);
  const float inv_s = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_m = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t sc[8], mq[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(std::min(63, round_int(inv_s * scales[j])));
    mq[j] = static_cast<uint8_t>(std::min(63, round_int(inv_m * mins[j])));
  }
  *d_out = f32_to_f16(max_scale / 63.0f);
  *dmin_out = f32_to_f16(max_min / 63.0f);
  std::memset(scales12, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      scales12[j] |= sc[j];
      scales12[j + 4] |= mq[j];
    } else {
      scales12[j + 4] = static_cast<uint8_t>((sc[j] & 0xF) | ((mq[j] & 0xF) << 4));
      scales12[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
      scales12[j] |= static_cast<uint8_t>((mq[j] >> 4) << 6);
    }
  }
  // Re-round every element against the stored (f16 / 6-bit) scale and min.
  const float d = f16_to_f32(*d_out), dmin = f16_to_f32(*dmin_out);
  for (int j = 0; j < 8; ++j) {
    uint8_t s, m;
    k_scale_min(j, scales12, &s, &m);
    const float dl = d * s, ml = dmin * m;
    for (int i = 0; i < 32; ++i) {
      const int l = dl != 0.0f ? round_int((x[32 * j + i] + ml) / dl) : 0;
      L[32 * j + i] = static_cast<uint8_t>(std::clamp(l, 0, nmax));
    }
  }
}

}  // namespace

void quantize_q4_k(const float* x, int64_t n, BlockQ4_K* y) {
  uint8_t L[kQKK];
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    quantize_k_asym(x, 15, &y[b].d, &y[b].dmin, y[b].scales, L);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        y[b].qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
      }
    }
  }
}

void quantize_q5_k(const float* x, int64_t n, BlockQ5_K* y) {
  uint8_t L[kQKK];
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    quantize_k_asym(x, 31, &y[b].d, &y[b].dmin, y[b].scales, L);
    std::memset(y[b].qh, 0, 32);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
        y[b].qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
        y[b].qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
  }
}

void quantize_q6_k(const float* x, int64_t n, BlockQ6_K* y) {
  int8_t L[kQKK];
  float scales[16], w[16];
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    float max_scale = 0.0f, amax = 0.0f;
    for (int j = 0; j < 16; ++j) {
      for (int i = 0; i < 16; ++i) w[i] = x[16 * j + i] * x[16 * j + i];
      scales[j] = fit_symmetric(x + 16 * j, w, 16, 32, L + 16 * j);
      if (std::fabs(scales[j]) > amax) {
        amax = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    BlockQ6_K& o = y[b];
    if (amax == 0.0f) {
      std::memset(&o, 0, sizeof(o));
      std::memset(o.ql, 0, sizeof(o.ql));
      for (int i = 0; i < kQKK; ++i) L[i] = 0;  // q = 32 - 32 = 0 below
      o.d = f32_to_f16(0.0f);
    } else {
      const float iscale = -128.0f / max_scale;
      o.d = f32_to_f16(1.0f / iscale);
      for (int j = 0; j < 16; ++j) {
        o.scales[j] = static_cast<int8_t>(std::clamp(round_int(iscale * scales[j]), -128, 127));
      }
      const float d = f16_to_f32(o.d);
      for (int j = 0; j < 16; ++j) {
        const float dl = d * static_cast<float>(o.scales[j]);
        for (int i = 0; i < 16; ++i) {
          const int l = dl != 0.0f ? round_int(x[16 * j + i] / dl) : 0;
          L[16 * j + i] = static_cast<int8_t>(std::clamp(l, -32, 31));
        }
      }
    }
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[128 * h + l] + 32, q2 = L[128 * h + l + 32] + 32;
        const int q3 = L[128 * h + l + 64] + 32, q4 = L[128 * h + l + 96] + 32;
        o.ql[64 * h + l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
        o.ql[64 * h + l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
        o.qh[32 * h + l] =
            static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
    }
  }
}

void quantize_q8_k(const float* x, int64_t n, BlockQ8_K* y) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    float amax = 0.0f;
    for (int i = 0; i < kQKK; ++i) amax = std::max(amax, std::fabs(x[i]));
    BlockQ8_K& o = y[b];
    if (amax == 0.0f) {
      std::memset(&o, 0, sizeof(o));
      continue;
    }
    const float iscale = 127.0f / amax;  // |q| <= 127 (never -128: the kernels rely on it)
    for (int i = 0; i < kQKK; ++i) {
      o.qs[i] = static_cast<int8_t>(std::clamp(round_int(iscale * x[i]), -127, 127));
    }
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += o.qs[16 * j + i];
      o.bsums[j] = static_cast<int16_t>(s);
    }
    o.d = 1.0f / iscale;
  }
}

void dequantize_q4_k(const BlockQ4_K* x, int64_t n, float* y) {
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = f16_to_f32(x[b].d), dmin = f16_to_f32(x[b].dmin);
    for (int c = 0; c < 4; ++c) {
      uint8_t s0, m0, s1, m1;
      k_scale_min(2 * c, x[b].scales, &s0, &m0);
      k_scale_min(2 * c + 1, x[b].scales, &s1, &m1);
      const float d0 = d * s0, d1 = d * s1, n0 = dmin * m0, n1 = dmin * m1;
      for (int l = 0; l < 32; ++l) {
        const uint8_t q = x[b].qs[32 * c + l];
        y[64 * c + l] = d0 * static_cast<float>(q & 0xF) - n0;
        y[64 * c + 32 + l] = d1 * static_cast<float>(q >> 4) - n1;
      }
    }
    y += kQKK;
  }
}

void dequantize_q5_k(const BlockQ5_K* x, int64_t n, float* y) {
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = f16_to_f32(x[b].d), dmin = f16_to_f32(x[b].dmin);
    for (int c = 0; c < 4; ++c) {
      uint8_t s0, m0, s1, m1;
      k_scale_min(2 * c, x[b].scales, &s0, &m0);
      k_scale_min(2 * c + 1, x[b].scales, &s1, &m1);
      const float d0 = d * s0, d1 = d * s1, n0 = dmin * m0, n1 = dmin * m1;
      for (int l = 0; l < 32; ++l) {
        const uint8_t q = x[b].qs[32 * c + l], h = x[b].qh[l];
        const int lo = (q & 0xF) | (((h >> (2 * c)) & 1) << 4);
        const int hi = (q >> 4) | (((h >> (2 * c + 1)) & 1) << 4);
        y[64 * c + l] = d0 * static_cast<float>(lo) - n0;
        y[64 * c + 32 + l] = d1 * static_cast<float>(hi) - n1;
      }
    }
    y += kQKK;
  }
}

void dequantize_q6_k(const BlockQ6_K* x, int64_t n, float* y) {
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = f16_to_f32(x[b].d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = x[b].ql + 64 * h;
      const uint8_t* qh = x[b].qh + 32 * h;
      const int8_t* sc = x[b].scales + 8 * h;
      float* yh = y + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        yh[l] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
        yh[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        yh[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        yh[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
    y += kQKK;
  }
}

void dequantize_q8_k(const BlockQ8_K* x, int64_t n, float* y) {
  for (int64_t b = 0; b < n / kQKK; ++b, y += kQKK) {
    for (int i = 0; i < kQKK; ++i) y[i] = x[b].d * static_cast<float>(x[b].qs[i]);
  }
}

}  // namespace eg::quant
