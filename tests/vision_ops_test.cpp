// The vision ops (ops/vision_ops.h) against float64 scalar references on random non-zero inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "ops/vision_ops.h"

namespace {

std::vector<float> rnd(size_t n, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

}  // namespace

TEST(VisionOps, LayerNormMatchesFloat64) {
  const int64_t rows = 7, n = 129;
  const auto x = rnd(rows * n, 1, -3.0f, 5.0f);  // non-zero mean
  const auto w = rnd(n, 2, 0.5f, 1.5f), b = rnd(n, 3);
  // BF16 weights: the reference uses the same rounded values.
  std::vector<uint16_t> wb(n);
  std::vector<float> wr(n);
  for (int64_t i = 0; i < n; ++i) {
    wb[i] = eg::f32_to_bf16(w[i]);
    wr[i] = eg::bf16_to_f32(wb[i]);
  }
  std::vector<float> y(rows * n), y2(rows * n);
  eg::ops::layernorm(x.data(), rows, n, wb.data(), eg::DType::BF16, b.data(), eg::DType::F32, 1e-6f, y.data());
  eg::ops::layernorm(x.data(), rows, n, w.data(), eg::DType::F32, nullptr, eg::DType::F32, 1e-6f, y2.data());
  double worst = 0, worst2 = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mean += x[r * n + i];
    mean /= n;
    for (int64_t i = 0; i < n; ++i) var += (x[r * n + i] - mean) * (x[r * n + i] - mean);
    var /= n;
    for (int64_t i = 0; i < n; ++i) {
      const double z = (x[r * n + i] - mean) / std::sqrt(var + 1e-6);
      worst = std::max(worst, std::abs(z * wr[i] + b[i] - y[r * n + i]));
      worst2 = std::max(worst2, std::abs(z * w[i] - y2[r * n + i]));
    }
  }
  EXPECT_LT(worst, 2e-5);
  EXPECT_LT(worst2, 2e-5);
  // In place.
  std::vector<float> z = x;
  eg::ops::layernorm(z.data(), rows, n, w.data(), eg::DType::F32, nullptr, eg::DType::F32, 1e-6f, z.data());
  EXPECT_EQ(z, y2);
}

TEST(VisionOps, BiasAndGelu) {
  const int64_t rows = 3, n = 10;
  auto x = rnd(rows * n, 4);
  const auto b = rnd(n, 5);
  const auto x0 = x;
  eg::ops::add_bias(x.data(), rows, n, b.data(), eg::DType::F32);
  for (int64_t i = 0; i < rows * n; ++i) EXPECT_FLOAT_EQ(x[i], x0[i] + b[i % n]);
  auto g = x0;
  eg::ops::gelu_tanh(g.data(), rows * n);
  for (int64_t i = 0; i < rows * n; ++i) {
    const double z = x0[i];
    const double want = 0.5 * z * (1 + std::tanh(std::sqrt(2 / M_PI) * (z + 0.044715 * z * z * z)));
    EXPECT_NEAR(g[i], want, 1e-6);
  }
}

TEST(VisionOps, BidirectionalAttentionMatchesFloat64) {
  for (auto [T, heads, D] : {std::tuple{37, 3, 16}, std::tuple{5, 1, 8}, std::tuple{64, 4, 32}}) {
    const auto q = rnd(T * heads * D, 6), k = rnd(T * heads * D, 7), v = rnd(T * heads * D, 8);
    std::vector<float> out(q.size());
    const float scale = 1.0f / std::sqrt(float(D));
    eg::ops::attention_bidirectional(q.data(), k.data(), v.data(), T, heads, D, scale, out.data());
    double worst = 0;
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < heads; ++h) {
        std::vector<double> s(T);
        double m = -1e300, sum = 0;
        for (int u = 0; u < T; ++u) {
          double d = 0;
          for (int i = 0; i < D; ++i) d += double(q[(t * heads + h) * D + i]) * k[(u * heads + h) * D + i];
          s[u] = d * scale;
          m = std::max(m, s[u]);
        }
        for (double& e : s) sum += (e = std::exp(e - m));
        for (int i = 0; i < D; ++i) {
          double o = 0;
          for (int u = 0; u < T; ++u) o += s[u] / sum * v[(u * heads + h) * D + i];
          worst = std::max(worst, std::abs(o - out[(t * heads + h) * D + i]));
        }
      }
    EXPECT_LT(worst, 1e-5) << T << " " << heads << " " << D;
  }
}
