// Gemma 4's per-layer-embedding kernels (src/backend/cuda/ple.h) on random non-zero inputs, against
// host references computed here. Label "cuda"; every test skips itself without a GPU.
//
// References and tolerances (R = the largest |reference value| of the case):
//  - matvec_f32: float64 Σ_k W[n,k]·x[t,k]; |Δ| ≤ 1e-5·Σ_k |W·x| (f32 products and a lane-strided
//    f32 sum: at most ~(K/32 + 5)·2^-24 of Σ|W·x| in the worst case, 5e-6 at K = 2560). T = 1
//    and T = 3, ldy > N (the columns past N and the rows stay as they were); the fixed summation
//    order: a row of a T = 3 call is bit-identical to the same row alone (T = 1), and reruns are
//    bit-identical.
//  - ple_combine: a float64 reimplementation of blocks::ple_inputs' formula (model/ple.cpp):
//    per row and layer slice of P, cs = c·proj_scale, n = cs·(1/√(mean(cs²) + eps))·w (w_offset
//    0), out = (n + tok)·mix. |Δ| ≤ 1e-5·(|n| + |tok|) (f32: the scale, the sum of P squares
//    ~√P·2^-24 relative, 1/√, three products and a sum; (n + tok) may cancel, so the bound is on
//    the magnitude of the terms, not of the result).
//  - gelu_mul_rows_by: bit-identical per row to gelu_mul_by (the decode kernel) rounded RNE to
//    the 16-bit type (the row kernels' rule, cuda_prefill_kernels_test.cpp), and against the CPU
//    (ops::gelu_tanh_mul): |Δ| ≤ (u + 2.1e-6)·|ref| + 1.1e-7·R (gelu_mul's f32 bound, then the
//    16-bit rounding of that value, u = 2^-8 bf16, 2^-11 f16). The gate rows have a stride past n (padding NaN) and
//    the up rows are a layer's slice of the [T, L·P] PLE inputs.
//  - dequant_rows: bit-exact against the host's expansion of the same stored rows
//    (quant::dequantize_row / cpu::to_f32, then one f32 multiply by the scale), for every dtype it
//    takes (Q4_0, Q8_0, Q6_K, F16, BF16, F32), rows quantized from random normal values by
//    quant::quantize_row plus F16/BF16 subnormals; the rows come through a PinnedBuffer whose
//    upload is fenced by an Event before the buffer is rewritten for a second call.
//  - convert_rows: bit-exact round-to-nearest-even: a table of hand-derived cases (ties to even
//    at both types' rounding points, f16 subnormals and overflow to inf, bf16 overflow at
//    FLT_MAX, ±0, ±inf) and random f32 bit patterns over the exponents 2^-31..2^32, against
//    f32_to_bf16 / f32_to_f16 (core/dtype.h).
#include <gtest/gtest.h>

#include "cuda_test_util.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/decode_kernels.h"
#include "backend/cuda/ple.h"
#include "backend/cuda/prefill.h"
#include "core/dtype.h"
#include "core/error.h"
#include "ops/ops.h"
#include "quant/quant.h"

namespace eg {
namespace {

namespace gpu = eg::cuda;

using cudatest::random_vec;
using cudatest::to_device;
using cudatest::to_host;

uint16_t round16(float v, gpu::GemmType t) { return t == gpu::GemmType::BF16 ? f32_to_bf16(v) : f32_to_f16(v); }
float from16(uint16_t b, gpu::GemmType t) { return t == gpu::GemmType::BF16 ? bf16_to_f32(b) : f16_to_f32(b); }
const char* type_name(gpu::GemmType t) { return t == gpu::GemmType::BF16 ? "bf16" : "f16"; }

float bits_to_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

class CudaPle : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu::device_available()) GTEST_SKIP() << "no CUDA device";
    stream_ = std::make_unique<gpu::Stream>(0);
  }
  gpu::Stream& s() { return *stream_; }
  std::unique_ptr<gpu::Stream> stream_;
};

struct MatvecCase {
  int64_t N, K;
  int T;
  int64_t ldy;
};

TEST_F(CudaPle, MatvecF32MatchesFloat64) {
  const float kSentinel = -12345.0f;
  const MatvecCase cases[] = {
      {8960, 1536, 1, 8963},    // gemma-4-e2b per_layer_model_projection, the decode step
      {8960, 1536, 3, 8960 + 64},
      {10752, 2560, 3, 10753},  // gemma-4-e4b
      {40, 96, 3, 45},
      {33, 99, 1, 40},          // K not a multiple of 4, N not a multiple of the warps per block
  };
  for (const MatvecCase& c : cases) {
    const std::vector<float> w = random_vec(static_cast<size_t>(c.N * c.K), 1 + c.K, 0.02f);
    const std::vector<float> x = random_vec(static_cast<size_t>(c.T * c.K), 2 + c.T, 2.0f);
    const std::vector<float> init(static_cast<size_t>(c.T * c.ldy), kSentinel);
    gpu::DeviceBuffer dw = to_device(w), dx = to_device(x), dy = to_device(init), dy2 = to_device(init);
    gpu::matvec_f32(s(), dw.as<const float>(), c.N, c.K, dx.as<const float>(), c.T, dy.as<float>(), c.ldy);
    gpu::matvec_f32(s(), dw.as<const float>(), c.N, c.K, dx.as<const float>(), c.T, dy2.as<float>(), c.ldy);
    s().sync();
    const std::vector<float> y = to_host<float>(dy, init.size());
    EXPECT_EQ(y, to_host<float>(dy2, init.size())) << "a rerun differs, N " << c.N << " K " << c.K;
    double worst = 0.0;
    for (int t = 0; t < c.T; ++t) {
      for (int64_t n = 0; n < c.N; ++n) {
        double ref = 0.0, mag = 0.0;
        for (int64_t k = 0; k < c.K; ++k) {
          const double p = static_cast<double>(w[n * c.K + k]) * x[t * c.K + k];
          ref += p;
          mag += std::fabs(p);
        }
        const double e = std::fabs(y[t * c.ldy + n] - ref);
        worst = std::max(worst, e / mag);
        ASSERT_LE(e, 1e-5 * mag) << "N " << c.N << " K " << c.K << " t " << t << " n " << n;
      }
      for (int64_t n = c.N; n < c.ldy; ++n) ASSERT_EQ(y[t * c.ldy + n], kSentinel) << "wrote past N, row " << t;
    }
    if (c.T > 1) {  // each row alone: the same bits (one warp per output, fixed order)
      for (int t = 0; t < c.T; ++t) {
        gpu::DeviceBuffer one = to_device(std::vector<float>(static_cast<size_t>(c.N), kSentinel));
        gpu::matvec_f32(s(), dw.as<const float>(), c.N, c.K, dx.as<const float>() + t * c.K, 1, one.as<float>(), c.N);
        s().sync();
        const std::vector<float> y1 = to_host<float>(one, static_cast<size_t>(c.N));
        for (int64_t n = 0; n < c.N; ++n) ASSERT_EQ(y1[n], y[t * c.ldy + n]) << "row " << t << " alone, n " << n;
      }
    }
    std::printf("matvec_f32 N %lld K %lld T %d: worst |dy| / sum|w x| = %.2e\n", static_cast<long long>(c.N),
                static_cast<long long>(c.K), c.T, worst);
  }
}

struct CombineCase {
  int T, L;
  int64_t P, H;
};

TEST_F(CudaPle, CombineMatchesTheFloat64Formula) {
  const CombineCase cases[] = {
      {3, 35, 256, 1536},  // gemma-4-e2b
      {2, 42, 256, 2560},  // gemma-4-e4b
      {1, 8, 64, 256},     // tiny-gemma4 (hidden_size_per_layer_input 64)
  };
  const float eps = 1e-6f;
  const float mix = static_cast<float>(std::pow(2.0, -0.5));  // as blocks::ple_inputs computes them
  for (const CombineCase& c : cases) {
    const float proj_scale = static_cast<float>(std::pow(static_cast<double>(c.H), -0.5));
    const int64_t LP = c.L * c.P;
    // c: the context projection x0·W_plmpᵀ (magnitude ~ √H·|x0|·|W|), tok: E_ple[id]·√P.
    const std::vector<float> ctx = random_vec(static_cast<size_t>(c.T * LP), 10 + c.L, 20.0f);
    const std::vector<float> tok = random_vec(static_cast<size_t>(c.T * LP), 11 + c.L, 1.0f);
    std::vector<float> w(static_cast<size_t>(c.P));
    {
      std::mt19937 rng(12);
      std::uniform_real_distribution<float> d(0.9f, 1.1f);
      for (auto& v : w) v = d(rng);
    }
    gpu::DeviceBuffer dc = to_device(ctx), dt = to_device(tok), dw = to_device(w);
    gpu::ple_combine(s(), c.T, c.L, c.P, dc.as<float>(), dt.as<const float>(), dw.as<const float>(), proj_scale, eps, mix);
    s().sync();
    const std::vector<float> got = to_host<float>(dc, static_cast<size_t>(c.T * LP));
    EXPECT_EQ(to_host<float>(dt, tok.size()), tok) << "tok changed";
    for (int t = 0; t < c.T; ++t)
      for (int l = 0; l < c.L; ++l) {
        const size_t base = (static_cast<size_t>(t) * c.L + l) * c.P;
        double ss = 0.0;
        for (int64_t i = 0; i < c.P; ++i) {
          const double cs = static_cast<double>(ctx[base + i]) * proj_scale;
          ss += cs * cs;
        }
        const double inv = 1.0 / std::sqrt(ss / static_cast<double>(c.P) + eps);
        for (int64_t i = 0; i < c.P; ++i) {
          const double n = static_cast<double>(ctx[base + i]) * proj_scale * inv * w[i];
          const double ref = (n + tok[base + i]) * mix;
          ASSERT_LE(std::fabs(got[base + i] - ref), 1e-5 * (std::fabs(n) + std::fabs(tok[base + i])))
              << "T " << c.T << " L " << c.L << " P " << c.P << ": row " << t << " layer " << l << " at " << i;
        }
      }
  }
}

TEST_F(CudaPle, GeluMulRowsByMatchesTheDecodeKernelAndTheCpu) {
  const int T = 5, L = 6;
  const float nan = std::nanf("");
  for (const int64_t P : {int64_t{256}, int64_t{64}}) {
    const int64_t gate_ld = P + 32, up_ld = L * P;
    const int layer = 4;
    std::vector<float> gate = random_vec(static_cast<size_t>(T * gate_ld), 20 + static_cast<uint32_t>(P), 2.0f);
    for (int t = 0; t < T; ++t) std::fill(gate.begin() + t * gate_ld + P, gate.begin() + (t + 1) * gate_ld, nan);
    const std::vector<float> ple = random_vec(static_cast<size_t>(T * up_ld), 21);
    gpu::DeviceBuffer dg = to_device(gate), dp = to_device(ple), row(static_cast<size_t>(P) * 4);
    for (gpu::GemmType gt : {gpu::GemmType::BF16, gpu::GemmType::F16}) {
      gpu::DeviceBuffer out(static_cast<size_t>(T * P) * 2);
      gpu::gelu_mul_rows_by(s(), T, P, dg.as<const float>(), gate_ld, dp.as<const float>() + layer * P, up_ld, gt, out.data());
      s().sync();
      const std::vector<uint16_t> h = to_host<uint16_t>(out, static_cast<size_t>(T * P));
      const float u = gt == gpu::GemmType::BF16 ? 1.0f / 256 : 1.0f / 2048;
      for (int t = 0; t < T; ++t) {
        const float* g = gate.data() + t * gate_ld;
        const float* up = ple.data() + t * up_ld + layer * P;
        gpu::gelu_mul_by(s(), dg.as<const float>() + t * gate_ld, dp.as<const float>() + t * up_ld + layer * P, P,
                         row.as<float>(), nullptr);
        s().sync();
        const std::vector<float> dec = to_host<float>(row, static_cast<size_t>(P));
        std::vector<float> ref(static_cast<size_t>(P));
        ops::gelu_tanh_mul(g, up, P, ref.data());
        float R = 0.0f;
        for (float v : ref) R = std::max(R, std::fabs(v));
        for (int64_t i = 0; i < P; ++i) {
          const uint16_t got = h[t * P + i];
          ASSERT_EQ(got, round16(dec[i], gt)) << type_name(gt) << " P " << P << " row " << t << " at " << i;
          ASSERT_NEAR(from16(got, gt), ref[i], (u + 2.1e-6f) * std::fabs(ref[i]) + 1.1e-7f * R)
              << type_name(gt) << " P " << P << " row " << t << " at " << i;
        }
      }
    }
  }
}

TEST_F(CudaPle, ConvertRowsRoundsToNearestEven) {
  struct Want {
    float x;
    uint16_t bf16, f16;
  };
  // Hand-derived (bits of the f32 input where it matters).
  const Want table[] = {
      {1.0f, 0x3f80, 0x3c00},
      {-2.0f, 0xc000, 0xc000},
      {0.0f, 0x0000, 0x0000},
      {-0.0f, 0x8000, 0x8000},
      {INFINITY, 0x7f80, 0x7c00},
      {-INFINITY, 0xff80, 0xfc00},
      {bits_to_float(0x3f808000), 0x3f80, 0x3c04},  // 1 + 2^-8: bf16 tie → even (down)
      {bits_to_float(0x3f818000), 0x3f82, 0x3c0c},  // 1 + 3·2^-8: bf16 tie → even (up)
      {bits_to_float(0x3f801000), 0x3f80, 0x3c00},  // 1 + 2^-11: f16 tie → even (down)
      {bits_to_float(0x3f803000), 0x3f80, 0x3c02},  // 1 + 3·2^-11: f16 tie → even (up)
      {bits_to_float(0x3f801008), 0x3f80, 0x3c01},  // just above the f16 tie
      {65504.0f, 0x4780, 0x7bff},                   // f16 max
      {bits_to_float(0x477fefff), 0x4780, 0x7bff},  // just below 65520: stays finite
      {65520.0f, 0x4780, 0x7c00},                   // f16 overflow → inf
      {-1e5f, 0xc7c3, 0xfc00},
      {FLT_MAX, 0x7f80, 0x7c00},                    // bf16 overflow → inf
      {bits_to_float(0x33800000), 0x3380, 0x0001},  // 2^-24: the smallest f16 subnormal
      {bits_to_float(0x33000000), 0x3300, 0x0000},  // 2^-25: tie → even (0)
      {bits_to_float(0x33400000), 0x3340, 0x0001},  // 0.75·2^-24
      {bits_to_float(0x33c00000), 0x33c0, 0x0002},  // 1.5·2^-24: tie → even (2)
      {bits_to_float(0x38800000), 0x3880, 0x0400},  // 2^-14: the smallest f16 normal
      {bits_to_float(0x387fe000), 0x3880, 0x0400},  // 2^-14 − 2^-25: tie → even (the normal)
      {0.1f, 0x3dcd, 0x2e66},
      {-3.14159274f, 0xc049, 0xc248},
  };
  const int T = 3;
  const int64_t n = 1536;
  std::vector<float> x(static_cast<size_t>(T * n));
  std::mt19937 rng(30);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) x[i] = nd(rng);
  for (int64_t i = n; i < 2 * n; ++i) {  // random bits, exponents 2^-31 .. 2^32, both signs
    const uint32_t e = 96 + static_cast<uint32_t>(rng() % 64), m = static_cast<uint32_t>(rng()) & 0x7fffffu;
    x[i] = bits_to_float((static_cast<uint32_t>(rng() & 1u) << 31) | (e << 23) | m);
  }
  const size_t nt = sizeof(table) / sizeof(table[0]);
  for (int64_t i = 2 * n; i < 3 * n; ++i) x[i] = table[(i - 2 * n) % nt].x;
  gpu::DeviceBuffer dx = to_device(x);
  for (gpu::GemmType gt : {gpu::GemmType::BF16, gpu::GemmType::F16}) {
    gpu::DeviceBuffer h(static_cast<size_t>(T * n) * 2);
    gpu::convert_rows(s(), T, n, dx.as<const float>(), gt, h.data());
    s().sync();
    const std::vector<uint16_t> got = to_host<uint16_t>(h, static_cast<size_t>(T * n));
    for (int64_t i = 0; i < T * n; ++i) {
      ASSERT_EQ(got[i], round16(x[i], gt)) << type_name(gt) << " at " << i << ", x = " << x[i];
      if (i >= 2 * n) {
        const Want& wt = table[(i - 2 * n) % nt];
        ASSERT_EQ(got[i], gt == gpu::GemmType::BF16 ? wt.bf16 : wt.f16) << type_name(gt) << " x = " << wt.x;
      }
    }
  }
}

// T rows of n values of dtype t, stored as a model file holds them (row after row).
std::vector<uint8_t> stored_rows(DType t, int T, int64_t n, uint32_t seed) {
  const std::vector<float> v = random_vec(static_cast<size_t>(T * n), seed, 0.7f);
  const size_t rb = dtype_row_bytes(t, n);
  std::vector<uint8_t> out(rb * T);
  for (int r = 0; r < T; ++r) {
    const float* x = v.data() + static_cast<size_t>(r) * n;
    uint8_t* o = out.data() + static_cast<size_t>(r) * rb;
    if (is_quantized(t)) {
      quant::quantize_row(t, x, n, o);
    } else if (t == DType::F32) {
      std::memcpy(o, x, rb);
    } else {
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b = t == DType::BF16 ? f32_to_bf16(x[i]) : f32_to_f16(x[i]);
        if (i % 17 == 3) b = static_cast<uint16_t>(1 + i % 5);  // subnormals of both types
        std::memcpy(o + 2 * i, &b, 2);
      }
    }
  }
  return out;
}

TEST_F(CudaPle, DequantRowsMatchTheHostBitForBit) {
  const int T = 5;
  const float scale = 16.0f * 1.0001f;  // not a power of two: the product rounds
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q6_K, DType::F16, DType::BF16, DType::F32}) {
    const int64_t n = 768;
    ASSERT_TRUE(gpu::dequant_rows_supports(t, n)) << dtype_name(t);
    const size_t rb = dtype_row_bytes(t, n);
    gpu::PinnedBuffer stage(rb * T);
    gpu::DeviceBuffer rows(rb * T), out(static_cast<size_t>(T * n) * 4);
    gpu::Event uploaded;
    for (uint32_t call = 0; call < 2; ++call) {
      const std::vector<uint8_t> host = stored_rows(t, T, n, 40 + call + 10 * static_cast<uint32_t>(t));
      uploaded.wait();  // the previous upload has read the staging buffer
      std::memcpy(stage.data(), host.data(), host.size());
      gpu::copy_to_device_async(s(), rows.data(), stage.data(), host.size());
      uploaded.record(s());
      gpu::dequant_rows(s(), t, rows.data(), T, n, scale, out.as<float>());
      s().sync();
      const std::vector<float> got = to_host<float>(out, static_cast<size_t>(T * n));
      std::vector<float> want(static_cast<size_t>(n));
      for (int r = 0; r < T; ++r) {
        cpu::to_f32(host.data() + static_cast<size_t>(r) * rb, t, static_cast<size_t>(n), want.data());
        for (int64_t i = 0; i < n; ++i) {
          const float w = want[i] * scale;
          ASSERT_EQ(std::memcmp(&got[r * n + i], &w, 4), 0)
              << dtype_name(t) << " call " << call << " row " << r << " value " << i << ": " << got[r * n + i] << " vs " << w;
        }
      }
    }
  }
}

TEST_F(CudaPle, BadArgumentsThrow) {
  {
    gpu::DeviceBuffer a(1 << 16), b(1 << 16);
    EXPECT_FALSE(gpu::dequant_rows_supports(DType::Q4_K, 256));
    EXPECT_FALSE(gpu::dequant_rows_supports(DType::Q6_K, 288));
    EXPECT_FALSE(gpu::dequant_rows_supports(DType::Q8_0, 48));
    EXPECT_THROW(gpu::dequant_rows(s(), DType::Q4_K, a.data(), 1, 256, 1.0f, b.as<float>()), Error);
    EXPECT_THROW(gpu::dequant_rows(s(), DType::Q6_K, a.data(), 1, 288, 1.0f, b.as<float>()), Error);
    EXPECT_THROW(gpu::dequant_rows(s(), DType::Q8_0, a.data(), 0, 256, 1.0f, b.as<float>()), Error);
  }
  gpu::DeviceBuffer a(4096), b(4096);
  // The 16-bit outputs do not take F32 (prefill.h).
  EXPECT_THROW(gpu::convert_rows(s(), 2, 64, a.as<const float>(), gpu::GemmType::F32, b.data()), Error);
  EXPECT_THROW(gpu::gelu_mul_rows_by(s(), 2, 64, a.as<const float>(), 64, a.as<const float>(), 64, gpu::GemmType::F32,
                                     b.data()),
               Error);
  // Strides shorter than a row, ldy < N, empty shapes.
  EXPECT_THROW(gpu::gelu_mul_rows_by(s(), 2, 64, a.as<const float>(), 32, a.as<const float>(), 64, gpu::GemmType::BF16,
                                     b.data()),
               Error);
  EXPECT_THROW(gpu::matvec_f32(s(), a.as<const float>(), 16, 16, a.as<const float>(), 1, b.as<float>(), 8), Error);
  EXPECT_THROW(gpu::matvec_f32(s(), a.as<const float>(), 16, 16, a.as<const float>(), 0, b.as<float>(), 16), Error);
  EXPECT_THROW(gpu::ple_combine(s(), 0, 4, 64, a.as<float>(), a.as<const float>(), a.as<const float>(), 1.0f, 1e-6f, 1.0f),
               Error);
  EXPECT_THROW(gpu::convert_rows(s(), 0, 64, a.as<const float>(), gpu::GemmType::BF16, b.data()), Error);
  s().sync();  // nothing was launched
}

}  // namespace
}  // namespace eg
