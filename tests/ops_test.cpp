// Kernels against plain double-precision references on random non-zero inputs of awkward sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/thread_pool.h"
#include "core/dtype.h"
#include "ops/ops.h"

namespace {

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = d(rng);
    if (x == 0.0f) x = 0.5f;
  }
  return v;
}

// A weight matrix stored as `t`, plus its exact f32 values.
struct TestWeight {
  std::vector<uint8_t> bytes;
  std::vector<float> exact;
  eg::ops::Weight w;
};

TestWeight make_weight(int64_t rows, int64_t cols, eg::DType t, uint32_t seed) {
  TestWeight tw;
  tw.exact = randn(rows * cols, seed, 0.1f);
  tw.bytes.resize(rows * cols * eg::dtype_size(t));
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (t == eg::DType::F32) {
      std::memcpy(tw.bytes.data() + 4 * i, &tw.exact[i], 4);
    } else {
      const uint16_t h = t == eg::DType::BF16 ? eg::f32_to_bf16(tw.exact[i]) : eg::f32_to_f16(tw.exact[i]);
      std::memcpy(tw.bytes.data() + 2 * i, &h, 2);
      tw.exact[i] = t == eg::DType::BF16 ? eg::bf16_to_f32(h) : eg::f16_to_f32(h);
    }
  }
  tw.w = {tw.bytes.data(), t, rows, cols};
  return tw;
}

TEST(Dtype, F16RoundTripAndSpecials) {
  for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.333251953125f})
    EXPECT_EQ(eg::f16_to_f32(eg::f32_to_f16(f)), f) << f;
  EXPECT_TRUE(std::isinf(eg::f16_to_f32(eg::f32_to_f16(1e6f))));
  EXPECT_TRUE(std::isnan(eg::f16_to_f32(eg::f32_to_f16(NAN))));
  EXPECT_EQ(eg::bf16_to_f32(eg::f32_to_bf16(1.00390625f)), 1.0f);  // ties to even
  EXPECT_EQ(eg::bf16_to_f32(eg::f32_to_bf16(1.01171875f)), 1.015625f);
}

class MatmulTest : public ::testing::TestWithParam<eg::DType> {};

TEST_P(MatmulTest, MatchesDoubleReference) {
  const eg::DType t = GetParam();
  for (int64_t K : {1, 7, 33, 257, 1000}) {
    for (int64_t T : {1, 3, 4, 9}) {
      const int64_t N = 37;
      TestWeight tw = make_weight(N, K, t, static_cast<uint32_t>(K * 31 + T));
      std::vector<float> x = randn(T * K, static_cast<uint32_t>(K + 7 * T));
      std::vector<float> y(T * N);
      eg::ops::matmul(x.data(), T, tw.w, y.data());
      for (int64_t i = 0; i < T; ++i)
        for (int64_t n = 0; n < N; ++n) {
          double ref = 0, mag = 0;
          for (int64_t k = 0; k < K; ++k) {
            ref += static_cast<double>(x[i * K + k]) * tw.exact[n * K + k];
            mag += std::abs(static_cast<double>(x[i * K + k]) * tw.exact[n * K + k]);
          }
          ASSERT_NEAR(y[i * N + n], ref, 1e-6 * mag + 1e-7) << "K=" << K << " T=" << T;
        }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, MatmulTest,
                         ::testing::Values(eg::DType::F32, eg::DType::F16, eg::DType::BF16));

TEST(Matmul, BatchedRowsAndThreadCountAreBitIdentical) {
  const int64_t K = 517, N = 61, T = 11;
  TestWeight tw = make_weight(N, K, eg::DType::BF16, 5);
  std::vector<float> x = randn(T * K, 6);
  std::vector<float> all(T * N), one(N), threads1(T * N);
  eg::ops::matmul(x.data(), T, tw.w, all.data());
  for (int64_t i = 0; i < T; ++i) {
    eg::ops::matmul(x.data() + i * K, 1, tw.w, one.data());
    for (int64_t n = 0; n < N; ++n) ASSERT_EQ(one[n], all[i * N + n]);
  }
  for (int threads : {1, 2, 3, 8}) {
    eg::cpu::set_num_threads(threads);
    eg::ops::matmul(x.data(), T, tw.w, threads1.data());
    EXPECT_EQ(threads1, all) << threads << " threads";
  }
  eg::cpu::set_num_threads(0);
}

TEST(RmsNorm, MatchesDoubleReference) {
  for (int64_t n : {1, 5, 64, 333}) {
    const int64_t rows = 3;
    std::vector<float> x = randn(rows * n, static_cast<uint32_t>(n));
    TestWeight w = make_weight(1, n, eg::DType::BF16, static_cast<uint32_t>(n + 1));
    for (float offset : {0.0f, 1.0f}) {
      std::vector<float> y(rows * n), y2(rows * n);
      eg::ops::rmsnorm(x.data(), rows, n, w.bytes.data(), eg::DType::BF16, offset, 1e-6f, y.data());
      eg::ops::rmsnorm(x.data(), rows, n, nullptr, eg::DType::F32, 0.0f, 1e-6f, y2.data());
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[r * n + i]) * x[r * n + i];
        const double inv = 1.0 / std::sqrt(ss / n + 1e-6);
        for (int64_t i = 0; i < n; ++i) {
          const double base = x[r * n + i] * inv;
          EXPECT_NEAR(y[r * n + i], base * (offset + w.exact[i]), 1e-5 * (1 + std::abs(base)));
          EXPECT_NEAR(y2[r * n + i], base, 1e-5 * (1 + std::abs(base)));
        }
      }
    }
  }
}

// The parallel path (>= 65536 elements: tasks of 16 rows, four rows' sums side by side) gives
// each row exactly the serial f32 definition: ss += x·x in index order, inv = 1/sqrt(ss/n + eps),
// y = (x·inv)·(w + offset); at every thread count, row counts that are no multiple of 4 or 16,
// and in place.
TEST(RmsNorm, ParallelRowsEqualTheSerialDefinitionBitForBit) {
  for (int64_t n : {1152, 2049}) {
    const int64_t rows = 61;
    const std::vector<float> x = randn(rows * n, static_cast<uint32_t>(n + 7));
    TestWeight w = make_weight(1, n, eg::DType::BF16, static_cast<uint32_t>(n + 8));
    std::vector<float> want(rows * n);
    for (int64_t r = 0; r < rows; ++r) {
      float ss = 0.0f;
      for (int64_t i = 0; i < n; ++i) ss += x[r * n + i] * x[r * n + i];
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + 1e-6f);
      for (int64_t i = 0; i < n; ++i) want[r * n + i] = (x[r * n + i] * inv) * (w.exact[i] + 1.0f);
    }
    for (int threads : {1, 2, 3}) {
      eg::cpu::set_num_threads(threads);
      std::vector<float> y(rows * n), inplace = x;
      eg::ops::rmsnorm(x.data(), rows, n, w.bytes.data(), eg::DType::BF16, 1.0f, 1e-6f, y.data());
      eg::ops::rmsnorm(inplace.data(), rows, n, w.bytes.data(), eg::DType::BF16, 1.0f, 1e-6f, inplace.data());
      for (int64_t i = 0; i < rows * n; ++i) {
        ASSERT_EQ(y[i], want[i]) << "n " << n << " threads " << threads << " row " << i / n;
        ASSERT_EQ(inplace[i], want[i]) << "n " << n << " threads " << threads << " row " << i / n;
      }
    }
  }
  eg::cpu::set_num_threads(0);
}

// RoPE over many positions (the parallel path) equals RoPE applied one position at a time.
TEST(Rope, ParallelPositionsEqualOnePositionAtATime) {
  const int64_t T = 75, heads = 4, hd = 256;
  std::vector<float> inv(hd / 2);
  eg::ops::rope_inv_freq(10000.0f, hd, 1.0f, inv.data());
  const std::vector<float> x = randn(T * heads * hd, 99);
  std::vector<int32_t> pos(T);
  for (int64_t t = 0; t < T; ++t) pos[t] = static_cast<int32_t>(3 * t + 1);
  std::vector<float> want = x;
  for (int64_t t = 0; t < T; ++t) eg::ops::rope(want.data() + t * heads * hd, 1, heads, hd, hd, &pos[t], inv.data());
  for (int threads : {1, 2, 3}) {
    eg::cpu::set_num_threads(threads);
    std::vector<float> y = x;
    eg::ops::rope(y.data(), T, heads, hd, hd, pos.data(), inv.data());
    for (int64_t i = 0; i < T * heads * hd; ++i) ASSERT_EQ(y[i], want[i]) << "threads " << threads << " at " << i;
  }
  eg::cpu::set_num_threads(0);
}

TEST(Rope, MatchesDoubleReferenceHalfSplit) {
  const int64_t T = 3, heads = 2, hd = 10;
  for (int64_t rot : {10, 4}) {
    std::vector<float> x = randn(T * heads * hd, static_cast<uint32_t>(rot));
    std::vector<float> orig = x;
    std::vector<float> inv(rot / 2);
    eg::ops::rope_inv_freq(10000.0f, rot, 2.0f, inv.data());
    for (int64_t i = 0; i < rot / 2; ++i)
      EXPECT_NEAR(inv[i], 1.0 / std::pow(10000.0, 2.0 * i / rot) / 2.0, 1e-6 * inv[i] + 1e-12);
    std::vector<int32_t> pos = {0, 5, 1234};
    eg::ops::rope(x.data(), T, heads, hd, rot, pos.data(), inv.data());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < heads; ++h) {
        const float* o = &orig[(t * heads + h) * hd];
        const float* r = &x[(t * heads + h) * hd];
        for (int64_t i = 0; i < rot / 2; ++i) {
          const double a = static_cast<double>(static_cast<float>(pos[t]) * inv[i]);
          const double e1 = o[i] * std::cos(a) - o[i + rot / 2] * std::sin(a);
          const double e2 = o[i + rot / 2] * std::cos(a) + o[i] * std::sin(a);
          EXPECT_NEAR(r[i], e1, 1e-4);
          EXPECT_NEAR(r[i + rot / 2], e2, 1e-4);
        }
        for (int64_t i = rot; i < hd; ++i) EXPECT_EQ(r[i], o[i]);
      }
  }
}

TEST(Softmax, MatchesDoubleReference) {
  for (int64_t n : {1, 2, 17, 1001}) {
    std::vector<float> x = randn(n, static_cast<uint32_t>(n), 5.0f);
    std::vector<float> y = x;
    eg::ops::softmax(y.data(), n);
    double mx = -1e300, sum = 0;
    for (float v : x) mx = std::max(mx, static_cast<double>(v));
    for (float v : x) sum += std::exp(v - mx);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], std::exp(x[i] - mx) / sum, 1e-6);
  }
}

TEST(GeluSoftcap, MatchDoubleReference) {
  const int64_t n = 999;
  std::vector<float> g = randn(n, 1, 3.0f), u = randn(n, 2), out(n);
  eg::ops::gelu_tanh_mul(g.data(), u.data(), n, out.data());
  for (int64_t i = 0; i < n; ++i) {
    const double z = g[i];
    const double ref = 0.5 * z * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (z + 0.044715 * z * z * z))) * u[i];
    EXPECT_NEAR(out[i], ref, 1e-5 * (1 + std::abs(ref)));
  }
  std::vector<float> s = randn(n, 3, 80.0f), s0 = s;
  eg::ops::softcap(s.data(), n, 30.0f);
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(s[i], 30.0 * std::tanh(s0[i] / 30.0), 1e-4);
}

// The vector gelu (exp form, capped exponent) at the edges: large |z|, tiny z, the tail lanes.
TEST(GeluSoftcap, GeluEdgesMatchDoubleReference) {
  std::vector<float> g = {-200.0f, -60.0f, -12.0f, -3.5f, -1e-3f, -1e-20f, 1e-20f, 1e-3f, 0.7f, 3.5f, 12.0f, 60.0f, 200.0f,
                          1e4f, -1e4f, 0.25f, -0.25f};
  std::vector<float> u(g.size(), 1.5f), out(g.size());
  for (size_t n : {g.size(), size_t{5}, size_t{1}}) {
    eg::ops::gelu_tanh_mul(g.data(), u.data(), static_cast<int64_t>(n), out.data());
    for (size_t i = 0; i < n; ++i) {
      const double z = g[i];
      const double ref = 0.5 * z * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (z + 0.044715 * z * z * z))) * 1.5;
      EXPECT_TRUE(std::isfinite(out[i])) << z;
      EXPECT_NEAR(out[i], ref, 2e-6 * std::abs(ref) + 1e-30) << "z " << z;
    }
  }
}

// The vector soft-cap (expm1 form) near 0, at the cap and far beyond it, and in the tail lanes.
TEST(GeluSoftcap, SoftcapEdgesMatchDoubleReference) {
  std::vector<float> x = {0.0f, 1e-30f, -1e-30f, 1e-6f, -1e-6f, 0.3f, -0.3f, 29.0f, 30.0f, -30.0f, 150.0f, -150.0f,
                          1e6f, -1e6f, 3e38f, -3e38f, 7.5f};
  for (size_t n : {x.size(), size_t{3}, size_t{1}}) {
    std::vector<float> y = x;
    eg::ops::softcap(y.data(), static_cast<int64_t>(n), 30.0f);
    for (size_t i = 0; i < n; ++i) {
      const double ref = 30.0 * std::tanh(static_cast<double>(x[i]) / 30.0);
      EXPECT_TRUE(std::isfinite(y[i])) << x[i];
      EXPECT_NEAR(y[i], ref, 4e-7 * std::abs(ref) + 1e-37) << "x " << x[i];
    }
  }
}

// Attention over a cache of n_pos positions with GQA, sliding window and soft-cap.
TEST(Attention, MatchesDoubleReference) {
  const int64_t H = 6, KVH = 2, D = 13, n_pos = 41;
  for (int64_t window : {0, 1, 7}) {
    for (float cap : {0.0f, 5.0f}) {
      std::vector<float> k = randn(n_pos * KVH * D, 11), v = randn(n_pos * KVH * D, 12);
      const int64_t T = 5;
      std::vector<int32_t> pos(T);
      for (int64_t t = 0; t < T; ++t) pos[t] = static_cast<int32_t>(n_pos - T + t);
      std::vector<float> q = randn(T * H * D, 13), out(T * H * D);
      eg::ops::AttentionParams p{H, KVH, D, 0.37f, cap, window};
      eg::ops::attention(q.data(), T, pos.data(), k.data(), v.data(), p, out.data());
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h) {
          const int64_t kvh = h / (H / KVH);
          std::vector<double> sc;
          std::vector<int64_t> keys;
          for (int64_t j = 0; j <= pos[t]; ++j) {
            if (window > 0 && pos[t] - j >= window) continue;
            double s = 0;
            for (int64_t d = 0; d < D; ++d) s += static_cast<double>(q[(t * H + h) * D + d]) * k[(j * KVH + kvh) * D + d];
            s *= 0.37;
            if (cap > 0) s = cap * std::tanh(s / cap);
            sc.push_back(s);
            keys.push_back(j);
          }
          double mx = -1e300, sum = 0;
          for (double s : sc) mx = std::max(mx, s);
          for (double& s : sc) sum += (s = std::exp(s - mx));
          for (int64_t d = 0; d < D; ++d) {
            double ref = 0;
            for (size_t j = 0; j < keys.size(); ++j) ref += sc[j] / sum * v[(keys[j] * KVH + kvh) * D + d];
            ASSERT_NEAR(out[(t * H + h) * D + d], ref, 1e-5) << "window " << window << " cap " << cap;
          }
        }
    }
  }
}

TEST(Kernels, Dot4EqualsDotBitwise) {
  for (eg::DType t : {eg::DType::F32, eg::DType::F16, eg::DType::BF16}) {
    for (size_t n : {1u, 15u, 16u, 17u, 63u, 200u}) {
      TestWeight w = make_weight(1, static_cast<int64_t>(n), t, static_cast<uint32_t>(n));
      std::vector<float> x = randn(4 * n, static_cast<uint32_t>(n + 100));
      const float* xs[4] = {x.data(), x.data() + n, x.data() + 2 * n, x.data() + 3 * n};
      float out[4];
      eg::cpu::dot4(xs, w.bytes.data(), t, n, out);
      for (int j = 0; j < 4; ++j) EXPECT_EQ(out[j], eg::cpu::dot(xs[j], w.bytes.data(), t, n));
    }
  }
}


// accumulate_pv against the scalar definition (o = o + p·v per key in order, the product rounded
// on its own) bit for bit, against float64 within rounding, and split over two calls.
// dot4_rows (attention's q·K, two rows per pass) gives every score dot()'s bits times the scale:
// odd and even row counts, D with and without a vector remainder and a scalar tail.
TEST(Kernels, Dot4RowsEqualsDotBitwise) {
  for (size_t D : {1u, 15u, 16u, 17u, 31u, 32u, 33u, 256u, 301u}) {
    for (int64_t nk : {1, 2, 3, 5, 64}) {
      const uint32_t seed = static_cast<uint32_t>(D * 17 + nk);
      const std::vector<float> X = randn(4 * D, seed), K = randn(static_cast<size_t>(nk) * D, seed + 1);
      std::vector<float> S(4 * nk, -1.0f);
      const float* xs[4] = {X.data(), X.data() + D, X.data() + 2 * D, X.data() + 3 * D};
      float* outs[4] = {S.data(), S.data() + nk, S.data() + 2 * nk, S.data() + 3 * nk};
      const float scale = 0.0625f * 1.1f;
      eg::cpu::dot4_rows(xs, K.data(), D, nk, scale, outs);
      for (int j = 0; j < 4; ++j)
        for (int64_t k = 0; k < nk; ++k)
          ASSERT_EQ(S[j * nk + k], eg::cpu::dot(xs[j], K.data() + k * D, eg::DType::F32, D) * scale)
              << "D " << D << " nk " << nk << " j " << j << " k " << k;
    }
  }
}

TEST(Kernels, AccumulatePvEqualsScalarLoopInKeyOrder) {
  for (size_t D : {1u, 15u, 16u, 17u, 63u, 64u, 65u, 256u, 301u}) {
    for (int m = 1; m <= 9; m += (m < 5 ? 1 : 4)) {
      for (int64_t nk : {1, 3, 64}) {
        const uint32_t seed = static_cast<uint32_t>(D * 131 + m * 7 + nk);
        std::vector<float> V = randn(static_cast<size_t>(nk) * D, seed);
        std::vector<float> P = randn(static_cast<size_t>(m * nk), seed + 1);
        std::vector<float> o = randn(static_cast<size_t>(m) * D, seed + 2);
        std::vector<float> want = o, split = o;
        std::vector<double> exact(o.begin(), o.end());
        std::vector<float*> outs, souts;
        std::vector<const float*> ps;
        for (int j = 0; j < m; ++j) {
          outs.push_back(o.data() + j * D);
          souts.push_back(split.data() + j * D);
          ps.push_back(P.data() + j * nk);
        }
        eg::cpu::accumulate_pv(outs.data(), ps.data(), m, V.data(), nk, D);
        // The same keys in two calls (the first k1 keys, then the rest).
        const int64_t k1 = nk / 2;
        if (k1 > 0) eg::cpu::accumulate_pv(souts.data(), ps.data(), m, V.data(), k1, D);
        std::vector<const float*> ps2;
        for (int j = 0; j < m; ++j) ps2.push_back(P.data() + j * nk + k1);
        eg::cpu::accumulate_pv(souts.data(), ps2.data(), m, V.data() + k1 * D, nk - k1, D);
        for (int j = 0; j < m; ++j)
          for (size_t d = 0; d < D; ++d) {
            float w = want[j * D + d];
            double sum = 0, mag = std::fabs(exact[j * D + d]);
            for (int64_t k = 0; k < nk; ++k) {
              volatile float prod = P[j * nk + k] * V[k * D + d];  // rounded on its own
              w = w + prod;
              sum += static_cast<double>(P[j * nk + k]) * V[k * D + d];
              mag += std::fabs(static_cast<double>(P[j * nk + k]) * V[k * D + d]);
            }
            ASSERT_EQ(o[j * D + d], w) << "D " << D << " m " << m << " nk " << nk << " j " << j << " d " << d;
            ASSERT_EQ(split[j * D + d], w) << "split, D " << D << " m " << m << " nk " << nk;
            ASSERT_NEAR(o[j * D + d], exact[j * D + d] + sum, 1e-6 * mag);
          }
      }
    }
  }
}

}  // namespace
