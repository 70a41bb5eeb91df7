// Quantized matmul kernels (backend/cpu/quant_kernels, ops::matmul) against a float64 reference
// on the dequantized weights, with a rigorous tolerance from the activation quantization error;
// bit-exact invariance to T, batching, thread count and SIMD target.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/thread_pool.h"
#include "core/dtype.h"
#include "core/error.h"
#include "hwy/targets.h"
#include "ops/ops.h"
#include "quant/quant.h"

namespace {

using eg::DType;

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = d(rng);
    if (x == 0.0f) x = 0.5f * scale;
  }
  return v;
}

struct QWeight {
  std::vector<uint8_t> bytes;
  std::vector<float> deq;  // the dequantized values: the weights the kernel must multiply by
  eg::ops::Weight w;
};

QWeight make_qweight(DType t, int64_t N, int64_t K, uint32_t seed) {
  QWeight q;
  const auto x = randn(static_cast<size_t>(N * K), seed, 0.05f);
  const size_t rb = eg::dtype_row_bytes(t, K);
  q.bytes.resize(rb * N);
  q.deq.resize(x.size());
  for (int64_t n = 0; n < N; ++n) {
    eg::quant::quantize_row(t, x.data() + n * K, K, q.bytes.data() + n * rb);
    eg::quant::dequantize_row(t, q.bytes.data() + n * rb, K, q.deq.data() + n * K);
  }
  q.w = {q.bytes.data(), t, N, K};
  return q;
}

bool k_quant(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K; }

const DType kWeightTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                              DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::EG_Q4_G128};

// y vs Σ_k deq(W)[n,k]·x[t,k] in f64. The kernel multiplies by x̂ (activations rounded to
// int8 with step d_b = amax_b/127 per block of 32, or per 256 for Q8_K), |x − x̂| ≤ d_b/2, so
// |y − ref| ≤ Σ_k |ŵ_k|·d_b(k)/2 + float accumulation error (≤ 1e-5·Σ|ŵ x̂| + tiny).
void check_matmul(DType t, int64_t N, int64_t K, int64_t T, uint32_t seed) {
  const QWeight q = make_qweight(t, N, K, seed);
  const auto x = randn(static_cast<size_t>(T * K), seed + 1);
  std::vector<float> y(static_cast<size_t>(T * N), -1.0f);
  eg::ops::matmul(x.data(), T, q.w, y.data());
  const int64_t ab = k_quant(t) ? 256 : 32;
  for (int64_t tt = 0; tt < T; ++tt) {
    const float* xt = x.data() + tt * K;
    std::vector<double> step(static_cast<size_t>(K / ab));
    for (int64_t b = 0; b < K / ab; ++b) {
      double amax = 0;
      for (int64_t i = 0; i < ab; ++i) amax = std::max(amax, std::fabs(static_cast<double>(xt[b * ab + i])));
      step[b] = amax / 127.0;
    }
    for (int64_t n = 0; n < N; ++n) {
      const float* wr = q.deq.data() + n * K;
      double ref = 0, bound = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        ref += static_cast<double>(wr[k]) * xt[k];
        bound += std::fabs(static_cast<double>(wr[k])) * step[k / ab] * 0.5;
        mag += std::fabs(static_cast<double>(wr[k]) * xt[k]);
      }
      const double tol = bound * 1.0001 + 1e-5 * mag + 1e-6;
      ASSERT_NEAR(y[tt * N + n], ref, tol)
          << eg::dtype_name(t) << " N=" << N << " K=" << K << " T=" << T << " t=" << tt << " n=" << n;
    }
  }
}

TEST(QuantKernels, MatmulMatchesF64ReferenceAtOddSizes) {
  uint32_t seed = 100;
  for (DType t : kWeightTypes) {
    const int64_t be = eg::dtype_block_elems(t);
    for (int64_t K : {32, 64, 288, 2048 + 256}) {
      if (K % be != 0) continue;
      for (int64_t N : {1, 3, 17, 67}) {
        for (int64_t T : {1, 2, 5, 9}) check_matmul(t, N, K, T, seed++);
      }
    }
  }
}

// A tight check: the kernel multiplies the dequantized weights by the *quantized* activations
// x̂ = d·q, with the rule documented in quant_kernels.h, restated here: per block of 32 (Q8_K:
// 256) d = amax/127, q = round-to-nearest-even(x/d) (Q8_K: q = rne(x·(127/amax)), d = 1/(127/amax)).
// Against Σ ŵ·x̂ in f64 the only error left is the f32 accumulation over K/32 block terms, so a
// wrong scale, offset, nibble or bit anywhere shows up far above the tolerance.
void check_matmul_exact_acts(DType t, int64_t N, int64_t K, int64_t T, uint32_t seed) {
  const QWeight q = make_qweight(t, N, K, seed);
  const auto x = randn(static_cast<size_t>(T * K), seed + 1);
  std::vector<float> y(static_cast<size_t>(T * N));
  eg::ops::matmul(x.data(), T, q.w, y.data());
  const int64_t ab = k_quant(t) ? 256 : 32;
  for (int64_t tt = 0; tt < T; ++tt) {
    const float* xt = x.data() + tt * K;
    std::vector<double> xh(static_cast<size_t>(K));
    for (int64_t b = 0; b < K / ab; ++b) {
      float amax = 0;
      for (int64_t i = 0; i < ab; ++i) amax = std::max(amax, std::fabs(xt[b * ab + i]));
      for (int64_t i = 0; i < ab; ++i) {
        double v;
        if (ab == 32) {
          const float d = amax / 127.0f;
          v = static_cast<double>(d) * std::nearbyint(xt[b * ab + i] * (1.0f / d));
        } else {
          const float is = 127.0f / amax;
          v = static_cast<double>(1.0f / is) * std::nearbyint(is * xt[b * ab + i]);
        }
        xh[b * ab + i] = v;
      }
    }
    for (int64_t n = 0; n < N; ++n) {
      double ref = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        ref += q.deq[n * K + k] * xh[k];
        mag += std::fabs(q.deq[n * K + k] * xh[k]);
      }
      const double tol = static_cast<double>(K / 32 + 4) * 1.2e-7 * mag + 1e-7;
      ASSERT_NEAR(y[tt * N + n], ref, tol)
          << eg::dtype_name(t) << " N=" << N << " K=" << K << " T=" << T << " t=" << tt << " n=" << n;
    }
  }
}

TEST(QuantKernels, MatmulMatchesQuantizedActivationReference) {
  uint32_t seed = 500;
  for (DType t : kWeightTypes) {
    const int64_t be = eg::dtype_block_elems(t);
    for (int64_t K : {32, 64, 288, 2048 + 256}) {
      if (K % be != 0) continue;
      for (int64_t N : {1, 17, 67}) {
        for (int64_t T : {1, 3, 9}) check_matmul_exact_acts(t, N, K, T, seed++);
      }
    }
  }
}

// Every output element must be bit-identical however the tokens are batched and however many
// threads run (ops.h's contract; chunked prefill and decode depend on it).
TEST(QuantKernels, BatchingAndThreadInvariance) {
  const int64_t N = 67, T = 9;
  for (DType t : kWeightTypes) {
    const int64_t K = 2048 + 256;
    const QWeight q = make_qweight(t, N, K, 31);
    const auto x = randn(static_cast<size_t>(T * K), 32);
    std::vector<float> all(T * N), one(T * N), chunk(T * N), thr1(T * N);
    eg::ops::matmul(x.data(), T, q.w, all.data());
    for (int64_t tt = 0; tt < T; ++tt) eg::ops::matmul(x.data() + tt * K, 1, q.w, one.data() + tt * N);
    eg::ops::matmul(x.data(), 4, q.w, chunk.data());
    eg::ops::matmul(x.data() + 4 * K, 5, q.w, chunk.data() + 4 * N);
    eg::cpu::set_num_threads(1);
    eg::ops::matmul(x.data(), T, q.w, thr1.data());
    eg::cpu::set_num_threads(3);
    std::vector<float> thr2(T * N);
    eg::ops::matmul(x.data(), T, q.w, thr2.data());
    eg::cpu::set_num_threads(0);
    EXPECT_EQ(0, std::memcmp(all.data(), one.data(), all.size() * 4)) << eg::dtype_name(t);
    EXPECT_EQ(0, std::memcmp(all.data(), chunk.data(), all.size() * 4)) << eg::dtype_name(t);
    EXPECT_EQ(0, std::memcmp(all.data(), thr1.data(), all.size() * 4)) << eg::dtype_name(t);
    EXPECT_EQ(0, std::memcmp(all.data(), thr2.data(), all.size() * 4)) << eg::dtype_name(t);
  }
}

// matmul_fused (one dispatch for several products of one input, as a layer's q/k/v): each output
// bit-identical to its own matmul, for mixed weight types (two activation formats and a float
// weight in one call) and thread counts; weights of another width are refused.
TEST(QuantKernels, FusedMatmulEqualsSeparateMatmuls) {
  const int64_t K = 512, T = 5;
  const QWeight a = make_qweight(DType::Q4_0, 67, K, 41), b = make_qweight(DType::Q6_K, 16, K, 42),
                c = make_qweight(DType::Q4_0, 33, K, 43);
  const auto wf = randn(static_cast<size_t>(40 * K), 44, 0.05f);
  const eg::ops::Weight f{wf.data(), DType::F32, 40, K};
  const auto x = randn(static_cast<size_t>(T * K), 45);
  std::vector<float> ya(T * 67), yb(T * 16), yc(T * 33), yf(T * 40);
  eg::ops::matmul(x.data(), T, a.w, ya.data());
  eg::ops::matmul(x.data(), T, b.w, yb.data());
  eg::ops::matmul(x.data(), T, c.w, yc.data());
  eg::ops::matmul(x.data(), T, f, yf.data());
  for (int threads : {1, 2, 3, 8}) {
    eg::cpu::set_num_threads(threads);
    for (int64_t tt : {int64_t{1}, T}) {
      std::vector<float> fa(T * 67), fb(T * 16), fc(T * 33), ff(T * 40);
      eg::ops::matmul_fused(x.data(), tt, {{&a.w, fa.data()}, {&b.w, fb.data()}, {&f, ff.data()}, {&c.w, fc.data()}});
      if (tt == 1) {  // one token: the first row of the T-token products
        EXPECT_EQ(0, std::memcmp(fa.data(), ya.data(), 67 * 4)) << threads;
        EXPECT_EQ(0, std::memcmp(fb.data(), yb.data(), 16 * 4)) << threads;
        EXPECT_EQ(0, std::memcmp(fc.data(), yc.data(), 33 * 4)) << threads;
        EXPECT_EQ(0, std::memcmp(ff.data(), yf.data(), 40 * 4)) << threads;
      } else {
        EXPECT_EQ(fa, ya) << threads;
        EXPECT_EQ(fb, yb) << threads;
        EXPECT_EQ(fc, yc) << threads;
        EXPECT_EQ(ff, yf) << threads;
      }
    }
  }
  eg::cpu::set_num_threads(0);
  const QWeight narrow = make_qweight(DType::Q4_0, 8, 256, 46);
  std::vector<float> y1(T * 67), y2(T * 8);
  EXPECT_THROW(eg::ops::matmul_fused(x.data(), T, {{&a.w, y1.data()}, {&narrow.w, y2.data()}}), eg::Error);
}

// The intrinsics paths (AVX2 / AVX-512) and the portable integer path compute the same exact
// block sums and the same float accumulation: results must be bit-identical on every target
// this machine supports.
TEST(QuantKernels, AllSimdTargetsBitIdentical) {
  const int64_t N = 5, K = 2048 + 256;
  for (DType t : kWeightTypes) {
    const QWeight q = make_qweight(t, N, K, 41);
    const auto x = randn(static_cast<size_t>(K), 42);
    std::vector<uint8_t> act(eg::cpu::act_row_bytes(t, K));
    eg::cpu::quantize_act_row(t, x.data(), K, act.data());
    std::vector<float> first;
    int targets = 0;
    for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
      hwy::SetSupportedTargetsForTest(target);
      std::vector<float> y(N);
      for (int64_t n = 0; n < N; ++n) {
        y[n] = eg::cpu::qdot(t, q.bytes.data() + n * eg::dtype_row_bytes(t, K), act.data(), K);
      }
      if (first.empty()) {
        first = y;
      } else {
        EXPECT_EQ(0, std::memcmp(first.data(), y.data(), N * 4))
            << eg::dtype_name(t) << " target " << hwy::TargetName(target);
      }
      ++targets;
      if (t == DType::Q8_0) std::printf("target %s\n", hwy::TargetName(target));
    }
    hwy::SetSupportedTargetsForTest(0);
    EXPECT_GE(targets, 2);  // at least one SIMD target and the portable fallback
  }
}

// The vector activation quantizer equals its scalar definition bit for bit: random blocks of
// several magnitudes, an all-zero block, and exact ties (x·(1/d) = k + 0.5, rounded to even).
TEST(QuantKernels, ActivationQuantizerEqualsScalarDefinition) {
  const int64_t K = 32 * 12;
  std::vector<float> x = randn(K, 99);
  for (int64_t b = 0; b < K / 32; ++b)
    for (int i = 0; i < 32; ++i) x[b * 32 + i] *= std::pow(10.0f, static_cast<float>(b % 5) - 2.0f);
  for (int i = 0; i < 32; ++i) x[32 * 3 + i] = 0.0f;                       // zero block: d = 0
  const float ties[] = {127.0f, 2.5f, 3.5f, -2.5f, -3.5f, 0.5f, -0.5f, 126.5f, -126.5f};
  for (int i = 0; i < 32; ++i) x[32 * 4 + i] = ties[i % 9];                 // d = 1 exactly
  std::vector<eg::cpu::ActQ8> got(K / 32), ref(K / 32);
  eg::cpu::quantize_act_row(DType::Q8_0, x.data(), K, got.data());
  eg::cpu::quantize_act_row_reference(x.data(), K, ref.data());
  ASSERT_EQ(std::memcmp(got.data(), ref.data(), got.size() * sizeof(eg::cpu::ActQ8)), 0);
  EXPECT_EQ(ref[4].qs[1], 2);   // 2.5 -> 2 (ties to even)
  EXPECT_EQ(ref[4].qs[2], 4);   // 3.5 -> 4
  EXPECT_EQ(ref[3].d, 0.0f);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(ref[3].qs[i], 0);
}

TEST(QuantKernels, BadShapesThrow) {
  std::vector<uint8_t> w(1 << 12);
  std::vector<float> x(64), y(4);
  const eg::ops::Weight bad{w.data(), DType::Q4_0, 2, 48};
  EXPECT_THROW(eg::ops::matmul(x.data(), 1, bad, y.data()), eg::Error);
  const eg::ops::Weight q4k{w.data(), DType::Q4_K, 2, 64};
  EXPECT_THROW(eg::ops::matmul(x.data(), 1, q4k, y.data()), eg::Error);
  const eg::ops::Weight q8k{w.data(), DType::Q8_K, 2, 256};
  EXPECT_THROW(eg::ops::matmul(x.data(), 1, q8k, y.data()), eg::Error);
}

}  // namespace
