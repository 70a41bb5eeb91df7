#include "ops/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/activations.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/thread_pool.h"
#include "core/error.h"

namespace eg::ops {

// matmul: src/ops/matmul.cpp

namespace {

// Work (elements) below which an element-wise or row-wise op stays on the calling thread.
constexpr int64_t kParallelMin = 65536;

// RMSNorm of rows [r0, r1). Each row's sum of squares is one serial chain in index order
// (ss += x·x, product and sum rounded separately: -ffp-contract=off); four rows advance their
// chains side by side (independent, so the adds overlap), which changes nothing in any row's value.
void rmsnorm_rows(const float* x, int64_t r0, int64_t r1, int64_t n, const float* wf, float eps, float* y) {
  constexpr int kR = 4;
  for (int64_t r = r0; r < r1; r += kR) {
    const int m = static_cast<int>(std::min<int64_t>(kR, r1 - r));
    float ss[kR] = {0.0f, 0.0f, 0.0f, 0.0f};
    const float* xr[kR];
    for (int j = 0; j < kR; ++j) xr[j] = x + (r + std::min(j, m - 1)) * n;
    if (m == kR) {
      for (int64_t i = 0; i < n; ++i)
        for (int j = 0; j < kR; ++j) ss[j] += xr[j][i] * xr[j][i];
    } else {
      for (int j = 0; j < m; ++j)
        for (int64_t i = 0; i < n; ++i) ss[j] += xr[j][i] * xr[j][i];
    }
    for (int j = 0; j < m; ++j) {
      const float inv = 1.0f / std::sqrt(ss[j] / static_cast<float>(n) + eps);
      float* yr = y + (r + j) * n;
      if (wf) {
        for (int64_t i = 0; i < n; ++i) yr[i] = (xr[j][i] * inv) * wf[i];
      } else {
        for (int64_t i = 0; i < n; ++i) yr[i] = xr[j][i] * inv;
      }
    }
  }
}

}  // namespace

void rmsnorm(const float* x, int64_t rows, int64_t n, const void* w, DType wtype, float w_offset,
             float eps, float* y) {
  std::vector<float> wf;
  if (w) {
    wf.resize(static_cast<size_t>(n));
    cpu::to_f32(w, wtype, static_cast<size_t>(n), wf.data());
    for (auto& v : wf) v += w_offset;
  }
  // Rows are independent: tasks of 16 rows (prefill norms are 512 × 1152 and more).
  constexpr int64_t kTaskRows = 16;
  const float* wp = w ? wf.data() : nullptr;
  cpu::parallel_for((rows + kTaskRows - 1) / kTaskRows, [&](int64_t task, int) {
    rmsnorm_rows(x, task * kTaskRows, std::min(rows, (task + 1) * kTaskRows), n, wp, eps, y);
  }, rows * n >= kParallelMin ? 0 : 1);
}

void rope_inv_freq(float theta, int64_t dim, float linear_factor, float* inv_freq) {
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv_freq[i] = (1.0f / std::pow(theta, expo)) / linear_factor;
  }
}

void rope(float* x, int64_t T, int64_t heads, int64_t head_dim, int64_t rot_dims,
          const int32_t* pos, const float* inv_freq) {
  const int64_t half = rot_dims / 2;
  // Positions are independent: tasks of 16 positions (each computes its own angles).
  constexpr int64_t kTaskRows = 16;
  cpu::parallel_for((T + kTaskRows - 1) / kTaskRows, [&](int64_t task, int) {
    thread_local std::vector<float> c, s;
    c.resize(static_cast<size_t>(half));
    s.resize(static_cast<size_t>(half));
    for (int64_t t = task * kTaskRows; t < std::min(T, (task + 1) * kTaskRows); ++t) {
      const float p = static_cast<float>(pos[t]);
      for (int64_t i = 0; i < half; ++i) {
        const float a = p * inv_freq[i];
        c[i] = std::cos(a);
        s[i] = std::sin(a);
      }
      for (int64_t h = 0; h < heads; ++h) {
        float* xh = x + (t * heads + h) * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = xh[i], x2 = xh[i + half];
          xh[i] = x1 * c[i] - x2 * s[i];
          xh[i + half] = x2 * c[i] + x1 * s[i];
        }
      }
    }
  }, T * heads * head_dim >= kParallelMin ? 0 : 1);
}

void softcap(float* x, int64_t n, float cap) { cpu::softcap(x, static_cast<size_t>(n), cap); }

void softmax(float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) {
  constexpr int64_t kChunk = 16384;  // elements per task; element-wise, so any split gives the same values
  cpu::parallel_for((n + kChunk - 1) / kChunk, [&](int64_t c, int) {
    const int64_t i = c * kChunk, end = std::min(n, i + kChunk);
    cpu::gelu_tanh_mul(gate + i, up + i, static_cast<size_t>(end - i), out + i);
  }, n > 65536 ? 0 : 1);
}

void attention(const float* q, int64_t T, const int32_t* pos, const float* k, const float* v,
               const AttentionParams& p, float* out) {
  if (p.symmetric) throw Error("ops::attention: symmetric (bidirectional) windows need kv::paged_attention");
  const int64_t H = p.n_heads, KVH = p.n_kv_heads, D = p.head_dim;
  const int64_t group = H / KVH;
  const int64_t max_keys = pos[T - 1] + 1;
  // One dispatch over (query, head) pairs; each pair is computed serially in key order.
  cpu::parallel_for(T * H, [&](int64_t th, int) {
    thread_local std::vector<float> scores;
    if (scores.size() < static_cast<size_t>(max_keys)) scores.resize(static_cast<size_t>(max_keys));
    const int64_t t = th / H, h = th % H;
    const int64_t qp = pos[t];
    const int64_t first = p.window > 0 ? std::max<int64_t>(0, qp - p.window + 1) : 0;
    const int64_t n = qp - first + 1;
    const int64_t kvh = h / group;
    const float* qh = q + (t * H + h) * D;
    for (int64_t j = 0; j < n; ++j) {
      const float* kr = k + ((first + j) * KVH + kvh) * D;
      float sc = cpu::dot(qh, kr, DType::F32, static_cast<size_t>(D)) * p.scale;
      if (p.softcap > 0.0f) sc = p.softcap * std::tanh(sc / p.softcap);
      scores[j] = sc;
    }
    softmax(scores.data(), n);
    float* oh = out + (t * H + h) * D;
    std::fill(oh, oh + D, 0.0f);
    for (int64_t j = 0; j < n; ++j) {
      const float* vr = v + ((first + j) * KVH + kvh) * D;
      const float pj = scores[j];
      for (int64_t d = 0; d < D; ++d) oh[d] += pj * vr[d];
    }
  });
}

void add_inplace(float* dst, const float* src, int64_t n) {
  constexpr int64_t kChunk = 16384;  // element-wise: any split gives the same values
  cpu::parallel_for((n + kChunk - 1) / kChunk, [&](int64_t c, int) {
    for (int64_t i = c * kChunk, end = std::min(n, i + kChunk); i < end; ++i) dst[i] += src[i];
  }, n >= kParallelMin ? 0 : 1);
}

}  // namespace eg::ops
