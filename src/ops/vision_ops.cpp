#include "ops/vision_ops.h"

#include <cmath>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/thread_pool.h"
#include "ops/ops.h"

namespace eg::ops {

namespace {

std::vector<float> as_f32(const void* p, DType t, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  cpu::to_f32(p, t, static_cast<size_t>(n), v.data());
  return v;
}

}  // namespace

void layernorm(const float* x, int64_t rows, int64_t n, const void* w, DType wt, const void* b, DType bt,
               float eps, float* y) {
  const std::vector<float> wf = as_f32(w, wt, n);
  const std::vector<float> bf = b ? as_f32(b, bt, n) : std::vector<float>(static_cast<size_t>(n), 0.0f);
  cpu::parallel_for(rows, [&](int64_t r, int) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    float mean = 0.0f;
    for (int64_t i = 0; i < n; ++i) mean += xr[i];
    mean /= static_cast<float>(n);
    float var = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      const float d = xr[i] - mean;
      var += d * d;
    }
    var /= static_cast<float>(n);
    const float inv = 1.0f / std::sqrt(var + eps);
    for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - mean) * inv * wf[i] + bf[i];
  });
}

void add_bias(float* x, int64_t rows, int64_t n, const void* b, DType bt) {
  const std::vector<float> bf = as_f32(b, bt, n);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) x[r * n + i] += bf[i];
}

void gelu_tanh(float* x, int64_t n) {
  const float k0 = 0.7978845608028654f;  // sqrt(2/pi)
  const float k1 = 0.044715f;
  for (int64_t i = 0; i < n; ++i) {
    const float z = x[i];
    x[i] = 0.5f * z * (1.0f + std::tanh(k0 * (z + k1 * z * z * z)));
  }
}

void attention_bidirectional(const float* q, const float* k, const float* v, int64_t T, int64_t heads,
                             int64_t D, float scale, float* out) {
  std::vector<float> qh(static_cast<size_t>(T * D)), kh(qh.size()), vt(qh.size()), sc(static_cast<size_t>(T * T)),
      oh(qh.size());
  const int64_t stride = heads * D;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) {
        qh[t * D + d] = q[t * stride + h * D + d];
        kh[t * D + d] = k[t * stride + h * D + d];
        vt[d * T + t] = v[t * stride + h * D + d];  // V_hᵀ [D, T]
      }
    matmul(qh.data(), T, Weight{kh.data(), DType::F32, T, D}, sc.data());  // scores [T, T] = Q·Kᵀ
    cpu::parallel_for(T, [&](int64_t t, int) {
      float* row = sc.data() + t * T;
      for (int64_t s = 0; s < T; ++s) row[s] *= scale;
      softmax(row, T);
    });
    matmul(sc.data(), T, Weight{vt.data(), DType::F32, D, T}, oh.data());  // [T, D] = P·V
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) out[t * stride + h * D + d] = oh[t * D + d];
  }
}

}  // namespace eg::ops
