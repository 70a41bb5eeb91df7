// The chunk-prefill kernels (src/backend/cuda/prefill.h) on random non-zero inputs. Label "cuda";
// every test skips itself without a GPU.
//
// References and tolerances (R = the largest |reference value| of the case):
//  - dequant_weight: bit-identical to the host's cpu::to_f32 then f32_to_bf16 / f32_to_f16.
//  - Gemm: float64 Σ over the same 16-bit inputs; |Δ| ≤ 1e-5·Σ_k |w·x| (f32 accumulation).
//  - attention_prefill: float64 softmax attention over the same K/V (the F16 output type, so one
//    f16 rounding): |Δ| ≤ 2^-10·|ref| + 1e-5·R.
//  - qk_rope_kv_rows, norm_rows, residual_norm_rows, gelu_mul_rows: the decode kernels
//    (qkv_heads, rmsnorm, residual_norm, gelu_mul) run on each row are the reference, and the
//    results are bit-identical (same formulas and summation order; 16-bit outputs rounded RNE).
//  - Gemm with GemmType::F32 (f32 weights and inputs: Gemma 4's per_layer_model_projection):
//    float64 Σ over the same f32 values; |Δ| ≤ 2e-6·Σ_k |w·x|. f32 products and accumulation
//    stay far below (random rounding errors: ~2^-24/√K of Σ|w·x|, worst case ~log2(K)·2^-24 for a
//    blocked sum); a TF32 path (10-bit mantissas: ~2^-11/√K, i.e. 1e-5 at K = 1536) fails, as it
//    should: the CPU multiplies in f32. The worst ratio is printed.
//  - Gemma 4 row kernels: qk_rope_kv_rows with v_norm / v_from_k / q_only and residual_norm_rows
//    with scale != 1 and w_next null against qkv_heads / residual_norm per row (bit-identical, as
//    above); q_only leaves the caches untouched and takes null caches; the V rows of v_from_k +
//    v_norm also against the CPU (ops::rmsnorm without a weight of the raw k projection):
//    |Δ| ≤ u·|ref| + 1.1e-5·R (u = 2^-11 f16, 2^-8 bf16; cuda_decode_kernels_test.cpp's bound).
#include <gtest/gtest.h>

#include "cuda_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/decode_kernels.h"
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

std::vector<uint16_t> round_all(const std::vector<float>& v, gpu::GemmType t) {
  std::vector<uint16_t> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = round16(v[i], t);
  return r;
}

// Rows of dtype t from random f32 values (quantized on the host for Q4_0 / Q8_0).
std::vector<uint8_t> make_weight(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const std::vector<float> f = random_vec(static_cast<size_t>(rows * cols), seed, 0.05f);
  const size_t rb = dtype_row_bytes(t, cols);
  std::vector<uint8_t> w(static_cast<size_t>(rows) * rb);
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = f.data() + r * cols;
    uint8_t* dst = w.data() + r * rb;
    if (t == DType::F16 || t == DType::BF16) {
      for (int64_t c = 0; c < cols; ++c) {
        const uint16_t b = t == DType::F16 ? f32_to_f16(src[c]) : f32_to_bf16(src[c]);
        std::memcpy(dst + 2 * c, &b, 2);
      }
    } else {
      quant::quantize_row(t, src, cols, dst);
    }
  }
  return w;
}

#define SKIP_WITHOUT_GPU() \
  if (!gpu::device_available()) GTEST_SKIP() << "no CUDA device"

TEST(CudaPrefillKernels, DequantMatchesTheHostBitForBit) {
  SKIP_WITHOUT_GPU();
  gpu::Stream s;
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::F16, DType::BF16}) {
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{13, 96}, {64, 1152}}) {
      const std::vector<uint8_t> w = make_weight(t, rows, cols, 7);
      std::vector<float> ref(static_cast<size_t>(rows * cols));
      cpu::to_f32(w.data(), t, ref.size(), ref.data());
      const gpu::DeviceWeight W = gpu::upload_weight(w.data(), t, rows, cols);
      for (gpu::GemmType gt : {gpu::GemmType::BF16, gpu::GemmType::F16}) {
        gpu::DeviceBuffer out(gpu::dequant_bytes(W));
        gpu::dequant_weight(s, W, gt, out.data());
        s.sync();
        const std::vector<uint16_t> got = to_host<uint16_t>(out, ref.size()), want = round_all(ref, gt);
        EXPECT_EQ(got, want) << dtype_name(t) << " " << rows << "x" << cols << " to " << (gt == gpu::GemmType::BF16 ? "bf16" : "f16");
      }
    }
  }
}

TEST(CudaPrefillKernels, GemmMatchesFloat64) {
  SKIP_WITHOUT_GPU();
  gpu::Stream s;
  gpu::Gemm g(s);
  for (gpu::GemmType gt : {gpu::GemmType::BF16, gpu::GemmType::F16}) {
    for (const auto& [N, K, T] : {std::tuple<int64_t, int64_t, int>{40, 96, 1}, {1536, 1152, 7}, {300, 256, 130}}) {
      const std::vector<uint16_t> w = round_all(random_vec(static_cast<size_t>(N * K), 3), gt);
      const std::vector<uint16_t> x = round_all(random_vec(static_cast<size_t>(T * K), 4), gt);
      const int64_t ldy = N + 5;  // a column range of a wider output
      gpu::DeviceBuffer dw = to_device(w), dx = to_device(x), dy(static_cast<size_t>(T * ldy) * 4);
      dy.zero();
      g.run(gt, dw.data(), N, K, dx.data(), T, dy.as<float>(), ldy);
      s.sync();
      const std::vector<float> y = to_host<float>(dy, static_cast<size_t>(T * ldy));
      double worst = 0.0;
      for (int t = 0; t < T; ++t)
        for (int64_t n = 0; n < N; ++n) {
          double ref = 0.0, mag = 0.0;
          for (int64_t k = 0; k < K; ++k) {
            const double p = static_cast<double>(from16(w[n * K + k], gt)) * from16(x[t * K + k], gt);
            ref += p;
            mag += std::fabs(p);
          }
          const double e = std::fabs(y[t * ldy + n] - ref) / mag;
          worst = std::max(worst, e);
          ASSERT_LE(std::fabs(y[t * ldy + n] - ref), 1e-5 * mag) << "N " << N << " K " << K << " t " << t << " n " << n;
        }
      for (int t = 0; t < T; ++t)
        for (int64_t n = N; n < ldy; ++n) ASSERT_EQ(y[t * ldy + n], 0.0f) << "wrote past N";
      std::printf("gemm %s N %lld K %lld T %d: worst |dy| / sum|w x| = %.2e\n", gt == gpu::GemmType::BF16 ? "bf16" : "f16",
                  static_cast<long long>(N), static_cast<long long>(K), T, worst);
    }
  }
}

TEST(CudaPrefillKernels, GemmF32MatchesFloat64) {
  SKIP_WITHOUT_GPU();
  gpu::Stream s;
  gpu::Gemm g(s);
  // (N, K, T): small; gemma-4-e2b's per_layer_model_projection (L·P = 35·256, H = 1536) on a chunk
  // of 7; e4b's (42·256, 2560) on 3; a long chunk.
  for (const auto& [N, K, T] : {std::tuple<int64_t, int64_t, int>{40, 96, 1}, {8960, 1536, 7}, {10752, 2560, 3},
                                {300, 256, 130}}) {
    const std::vector<float> w = random_vec(static_cast<size_t>(N * K), 5, 0.02f);
    const std::vector<float> x = random_vec(static_cast<size_t>(T * K), 6, 2.0f);
    const int64_t ldy = N + 3;
    gpu::DeviceBuffer dw = to_device(w), dx = to_device(x), dy(static_cast<size_t>(T * ldy) * 4);
    dy.zero();
    g.run(gpu::GemmType::F32, dw.data(), N, K, dx.data(), T, dy.as<float>(), ldy);
    s.sync();
    const std::vector<float> y = to_host<float>(dy, static_cast<size_t>(T * ldy));
    double worst = 0.0;
    for (int t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n) {
        double ref = 0.0, mag = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          const double p = static_cast<double>(w[n * K + k]) * x[t * K + k];
          ref += p;
          mag += std::fabs(p);
        }
        worst = std::max(worst, std::fabs(y[t * ldy + n] - ref) / mag);
        ASSERT_LE(std::fabs(y[t * ldy + n] - ref), 2e-6 * mag) << "N " << N << " K " << K << " t " << t << " n " << n;
      }
    for (int t = 0; t < T; ++t)
      for (int64_t n = N; n < ldy; ++n) ASSERT_EQ(y[t * ldy + n], 0.0f) << "wrote past N";
    std::printf("gemm f32 N %lld K %lld T %d: worst |dy| / sum|w x| = %.2e\n", static_cast<long long>(N),
                static_cast<long long>(K), T, worst);
  }
}

struct AttnCase {
  int nh, nkv, hd, window, T, pos0;
  float softcap;
  gpu::KVElem kv;
};

TEST(CudaPrefillKernels, AttentionMatchesFloat64) {
  SKIP_WITHOUT_GPU();
  gpu::Stream s;
  const AttnCase cases[] = {
      {4, 1, 256, 0, 37, 20, 0.0f, gpu::KVElem::F32},    // gemma-3-1b heads, a chunk after 20 cached keys
      {4, 1, 256, 16, 70, 5, 0.0f, gpu::KVElem::F16},    // sliding window shorter than the chunk
      {8, 4, 64, 0, 200, 0, 50.0f, gpu::KVElem::BF16},   // gemma-2 style: soft-cap, GQA 2, 4 queries per warp
      {2, 2, 96, 40, 9, 100, 0.0f, gpu::KVElem::F32},    // head_dim 96 (lanes past hd idle), window
      {2, 1, 512, 0, 33, 3, 30.0f, gpu::KVElem::F16},    // head_dim 512
      {1, 1, 128, 0, 1, 0, 0.0f, gpu::KVElem::F32},      // one query, one key
      // Long enough key ranges for split keys (run with and without the scratch below):
      {4, 1, 256, 0, 300, 200, 0.0f, gpu::KVElem::F16},  // 500 keys: 4 spans of 128
      {2, 1, 256, 100, 300, 0, 0.0f, gpu::KVElem::F16},  // window 100: tiles whose first span is not 0
      {2, 1, 512, 60, 150, 400, 20.0f, gpu::KVElem::BF16},  // window at depth: keys 341..549
      {8, 2, 128, 0, 1, 700, 0.0f, gpu::KVElem::F32},    // one query after 700 keys
  };
  for (const AttnCase& c : cases) {
    const int P = c.pos0 + c.T;  // keys 0..P-1 in the cache
    const std::vector<float> q = random_vec(static_cast<size_t>(c.T) * c.nh * c.hd, 11, 0.5f);
    std::vector<float> k = random_vec(static_cast<size_t>(P) * c.nkv * c.hd, 12, 0.5f);
    std::vector<float> v = random_vec(static_cast<size_t>(P) * c.nkv * c.hd, 13);
    gpu::DeviceBuffer dk, dv;
    if (c.kv == gpu::KVElem::F32) {
      dk = to_device(k);
      dv = to_device(v);
    } else {
      const gpu::GemmType rt = c.kv == gpu::KVElem::F16 ? gpu::GemmType::F16 : gpu::GemmType::BF16;
      const std::vector<uint16_t> k16 = round_all(k, rt), v16 = round_all(v, rt);
      for (size_t i = 0; i < k.size(); ++i) {
        k[i] = from16(k16[i], rt);
        v[i] = from16(v16[i], rt);
      }
      dk = to_device(k16);
      dv = to_device(v16);
    }
    gpu::AttentionArgs a;
    a.n_heads = c.nh;
    a.n_kv_heads = c.nkv;
    a.head_dim = c.hd;
    a.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    a.softcap = c.softcap;
    a.window = c.window;
    a.kv = c.kv;
    gpu::DeviceBuffer dq = to_device(q), dout(static_cast<size_t>(c.T) * c.nh * c.hd * 2);
    gpu::DeviceBuffer dout_split(dout.bytes()), scratch(gpu::attention_prefill_scratch_bytes(a, c.T));
    gpu::attention_prefill(s, a, c.T, c.pos0, dq.as<const float>(), dk.data(), dv.data(), gpu::GemmType::F16,
                           dout.data());
    gpu::attention_prefill(s, a, c.T, c.pos0, dq.as<const float>(), dk.data(), dv.data(), gpu::GemmType::F16,
                           dout_split.data(), scratch.data(), scratch.bytes());
    const int splits = gpu::attention_prefill_splits(s, a, c.T, c.pos0, scratch.bytes());
    EXPECT_EQ(gpu::attention_prefill_splits(s, a, c.T, c.pos0, scratch.bytes() - 1), 1) << "scratch too small";
    if (c.pos0 + c.T - (c.window > 0 ? std::max(0, c.pos0 - c.window + 1) : 0) > 128)
      EXPECT_GT(splits, 1) << "T " << c.T << " pos0 " << c.pos0 << ": the split path is not exercised";
    s.sync();
    const std::vector<uint16_t> out0 = to_host<uint16_t>(dout, static_cast<size_t>(c.T) * c.nh * c.hd);
    const std::vector<uint16_t> out1 = to_host<uint16_t>(dout_split, out0.size());
    std::vector<double> ref(out0.size());
    double R = 0.0;
    for (int t = 0; t < c.T; ++t)
      for (int h = 0; h < c.nh; ++h) {
        const int p = c.pos0 + t, kvh = h / (c.nh / c.nkv);
        const int lo = c.window > 0 ? std::max(0, p - c.window + 1) : 0;
        std::vector<double> sc;
        double mx = -1e300;
        for (int j = lo; j <= p; ++j) {
          double d = 0.0;
          for (int i = 0; i < c.hd; ++i)
            d += static_cast<double>(q[(static_cast<size_t>(t) * c.nh + h) * c.hd + i]) * k[(static_cast<size_t>(j) * c.nkv + kvh) * c.hd + i];
          d *= a.scale;
          if (c.softcap > 0.0f) d = c.softcap * std::tanh(d / c.softcap);
          sc.push_back(d);
          mx = std::max(mx, d);
        }
        double L = 0.0;
        for (double& e : sc) L += (e = std::exp(e - mx));
        for (int i = 0; i < c.hd; ++i) {
          double o = 0.0;
          for (int j = lo; j <= p; ++j) o += sc[j - lo] * v[(static_cast<size_t>(j) * c.nkv + kvh) * c.hd + i];
          ref[(static_cast<size_t>(t) * c.nh + h) * c.hd + i] = o / L;
          R = std::max(R, std::fabs(o / L));
        }
      }
    for (const std::vector<uint16_t>* out : {&out0, &out1})
      for (size_t i = 0; i < out->size(); ++i)
        ASSERT_LE(std::fabs(f16_to_f32((*out)[i]) - ref[i]), std::ldexp(std::fabs(ref[i]), -10) + 1e-5 * R)
            << "nh " << c.nh << " hd " << c.hd << " window " << c.window << " T " << c.T << " at " << i
            << (out == &out1 ? " (split keys, " + std::to_string(splits) + " spans)" : std::string(" (unsplit)"));
  }
}

// The row kernels against the decode kernels run per row (bit-identical).
TEST(CudaPrefillKernels, RowKernelsMatchTheDecodeKernels) {
  SKIP_WITHOUT_GPU();
  gpu::Stream s;
  const int T = 5, pos0 = 9, nh = 4, nkv = 2, hd = 128, rope = 128;
  const int64_t H = 256, I = 96, wq = static_cast<int64_t>(nh + 2 * nkv) * hd;
  const float off = 1.0f, eps = 1e-6f;
  // q/k norms + RoPE + K/V write, F16 and BF16 caches.
  const std::vector<float> qkv = random_vec(static_cast<size_t>(T * wq), 21, 2.0f);
  const std::vector<float> qn = random_vec(hd, 22, 0.1f), kn = random_vec(hd, 23, 0.1f);
  std::vector<float> inv(rope / 2);
  for (int i = 0; i < rope / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / rope);
  gpu::DeviceBuffer dqkv = to_device(qkv), dqn = to_device(qn), dkn = to_device(kn), dinv = to_device(inv);
  for (gpu::KVElem kv : {gpu::KVElem::F16, gpu::KVElem::BF16}) {
    gpu::QKVHeadArgs a;
    a.n_heads = nh;
    a.n_kv_heads = nkv;
    a.head_dim = hd;
    a.rope_dims = rope;
    a.q_norm_dev = dqn.as<const float>();
    a.k_norm_dev = dkn.as<const float>();
    a.inv_freq_dev = dinv.as<const float>();
    a.kv = kv;
    const size_t kvn = static_cast<size_t>(pos0 + T) * nkv * hd;
    gpu::DeviceBuffer kc(kvn * 2), vc(kvn * 2), kc2(kvn * 2), vc2(kvn * 2), qo(static_cast<size_t>(T) * nh * hd * 4),
        qo2(static_cast<size_t>(nh) * hd * 4), args(sizeof(gpu::StepArgs));
    for (auto* b : {&kc, &vc, &kc2, &vc2}) b->zero();
    gpu::qk_rope_kv_rows(s, a, T, pos0, dqkv.as<const float>(), qo.as<float>(), kc.data(), vc.data());
    s.sync();
    const std::vector<float> q_rows = to_host<float>(qo, static_cast<size_t>(T) * nh * hd);
    for (int t = 0; t < T; ++t) {
      const gpu::StepArgs sa{0, pos0 + t};
      args.upload(&sa, sizeof sa);
      gpu::qkv_heads(s, a, dqkv.as<const float>() + t * wq, args.as<const gpu::StepArgs>(), qo2.as<float>(), kc2.data(),
                     vc2.data());
      s.sync();
      const std::vector<float> q1 = to_host<float>(qo2, static_cast<size_t>(nh) * hd);
      for (int i = 0; i < nh * hd; ++i) ASSERT_EQ(q_rows[t * nh * hd + i], q1[i]) << "q row " << t << " at " << i;
    }
    EXPECT_EQ(to_host<uint16_t>(kc, kvn), to_host<uint16_t>(kc2, kvn));
    EXPECT_EQ(to_host<uint16_t>(vc, kvn), to_host<uint16_t>(vc2, kvn));
  }
  // norm_rows, residual_norm_rows, gelu_mul_rows.
  const std::vector<float> x = random_vec(static_cast<size_t>(T * H), 31, 3.0f), proj = random_vec(static_cast<size_t>(T * H), 32);
  const std::vector<float> w1 = random_vec(H, 33, 0.1f), w2 = random_vec(H, 34, 0.1f);
  std::vector<float> gu = random_vec(static_cast<size_t>(T * 2 * I), 35);
  gpu::DeviceBuffer dx = to_device(x), dp = to_device(proj), dw1 = to_device(w1), dw2 = to_device(w2), dgu = to_device(gu);
  for (gpu::GemmType gt : {gpu::GemmType::BF16, gpu::GemmType::F16}) {
    gpu::DeviceBuffer h16(static_cast<size_t>(T * H) * 2), ref(static_cast<size_t>(T * H) * 4);
    gpu::norm_rows(s, T, H, dx.as<const float>(), dw1.as<const float>(), off, eps, gt, h16.data());
    gpu::rmsnorm(s, dx.as<const float>(), T, H, dw1.as<const float>(), off, eps, ref.as<float>());
    s.sync();
    EXPECT_EQ(to_host<uint16_t>(h16, static_cast<size_t>(T * H)), round_all(to_host<float>(ref, static_cast<size_t>(T * H)), gt));
    gpu::DeviceBuffer xr = to_device(x), x1 = to_device(x), y1(static_cast<size_t>(H) * 4);
    gpu::residual_norm_rows(s, T, H, xr.as<float>(), dp.as<const float>(), dw1.as<const float>(), dw2.as<const float>(), off,
                            eps, gt, h16.data());
    s.sync();
    const std::vector<uint16_t> hr = to_host<uint16_t>(h16, static_cast<size_t>(T * H));
    const std::vector<float> xrh = to_host<float>(xr, static_cast<size_t>(T * H));
    for (int t = 0; t < T; ++t) {
      gpu::residual_norm(s, H, x1.as<float>() + t * H, dp.as<const float>() + t * H, dw1.as<const float>(),
                         dw2.as<const float>(), off, eps, y1.as<float>(), nullptr);
      s.sync();
      const std::vector<float> y = to_host<float>(y1, static_cast<size_t>(H));
      for (int64_t i = 0; i < H; ++i) ASSERT_EQ(hr[t * H + i], round16(y[i], gt)) << "residual_norm row " << t;
    }
    EXPECT_EQ(xrh, to_host<float>(x1, static_cast<size_t>(T * H)));
    for (gpu::GateUpLayout lay : {gpu::GateUpLayout::Stacked, gpu::GateUpLayout::Interleaved}) {
      gpu::DeviceBuffer g16(static_cast<size_t>(T * I) * 2), gref(static_cast<size_t>(I) * 4), row(static_cast<size_t>(2 * I) * 4);
      gpu::gelu_mul_rows(s, T, I, dgu.as<const float>(), lay, gt, g16.data());
      s.sync();
      const std::vector<uint16_t> g = to_host<uint16_t>(g16, static_cast<size_t>(T * I));
      for (int t = 0; t < T; ++t) {
        std::vector<float> r(2 * I);  // the row in the stacked layout gelu_mul takes
        for (int64_t i = 0; i < I; ++i) {
          const int64_t gi = lay == gpu::GateUpLayout::Stacked ? i : (i / 4) * 8 + i % 4;
          const int64_t ui = lay == gpu::GateUpLayout::Stacked ? I + i : gi + 4;
          r[i] = gu[t * 2 * I + gi];
          r[I + i] = gu[t * 2 * I + ui];
        }
        row.upload(r.data(), r.size() * 4);
        gpu::gelu_mul(s, row.as<const float>(), I, gref.as<float>(), nullptr);
        s.sync();
        const std::vector<float> want = to_host<float>(gref, static_cast<size_t>(I));
        for (int64_t i = 0; i < I; ++i) ASSERT_EQ(g[t * I + i], round16(want[i], gt)) << "gelu row " << t << " at " << i;
      }
    }
  }
}

// Gemma 4's norms are plain scales (w_offset 0): weights uniform in [0.9, 1.1).
std::vector<float> around_one(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(0.9f, 1.1f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

struct G4RowCase {
  int nh, nkv, hd, rope_pairs;
  bool v_norm, v_from_k, q_only;
  gpu::KVElem kv;
};

// The Gemma 4 flags of the row kernels against the decode kernels run per row (bit-identical).
TEST(CudaPrefillKernels, Gemma4RowKernelsMatchTheDecodeKernels) {
  SKIP_WITHOUT_GPU();
  gpu::Stream s;
  const int T = 5, pos0 = 9;
  const float eps = 1e-6f, nan = std::nanf("");
  constexpr uint8_t kSentinel = 0x5a;
  const G4RowCase cases[] = {
      {8, 1, 256, 128, true, false, false, gpu::KVElem::F16},   // gemma-4-e2b sliding layer
      {4, 1, 512, 64, true, true, false, gpu::KVElem::BF16},    // K=V full layer, hd 512, proportional RoPE
      {4, 2, 256, 128, false, true, false, gpu::KVElem::F16},   // v_from_k alone
      {8, 1, 512, 64, true, false, true, gpu::KVElem::F16},     // KV-shared layer
  };
  for (const G4RowCase& c : cases) {
    const int64_t wq = static_cast<int64_t>(c.nh + 2 * c.nkv) * c.hd, qn = static_cast<int64_t>(c.nh) * c.hd,
                  kn = static_cast<int64_t>(c.nkv) * c.hd;
    std::vector<float> qkv = random_vec(static_cast<size_t>(T * wq), 60 + c.hd, 2.0f);
    for (int t = 0; t < T; ++t) {  // the slots the kernel must not read hold NaN; the row stride stays wq
      float* r = qkv.data() + t * wq;
      if (c.v_from_k || c.q_only) std::fill(r + qn + kn, r + wq, nan);
      if (c.q_only) std::fill(r + qn, r + qn + kn, nan);
    }
    const std::vector<float> qnw = around_one(c.hd, 61), knw = around_one(c.hd, 62);
    std::vector<float> inv(c.hd / 2);
    for (int i = 0; i < c.hd / 2; ++i) inv[i] = i < c.rope_pairs ? std::pow(10000.0f, -2.0f * i / c.hd) : 0.0f;
    gpu::DeviceBuffer dqkv = to_device(qkv), dqn = to_device(qnw), dkn = to_device(knw), dinv = to_device(inv);
    gpu::QKVHeadArgs a;
    a.n_heads = c.nh;
    a.n_kv_heads = c.nkv;
    a.head_dim = c.hd;
    a.rope_dims = c.hd;
    a.q_norm_dev = dqn.as<const float>();
    a.k_norm_dev = dkn.as<const float>();
    a.w_offset = 0.0f;
    a.eps = eps;
    a.inv_freq_dev = dinv.as<const float>();
    a.kv = c.kv;
    a.v_norm = c.v_norm;
    a.v_from_k = c.v_from_k;
    a.q_only = c.q_only;
    const size_t kvn = static_cast<size_t>(pos0 + T) * kn;
    const std::vector<uint8_t> fill(kvn * 2, kSentinel);
    gpu::DeviceBuffer kc(kvn * 2), vc(kvn * 2), kc2(kvn * 2), vc2(kvn * 2), qo(static_cast<size_t>(T * qn) * 4),
        qo2(static_cast<size_t>(qn) * 4), args(sizeof(gpu::StepArgs));
    for (auto* b : {&kc, &vc, &kc2, &vc2}) b->upload(fill.data(), fill.size());
    const std::string what = "hd " + std::to_string(c.hd) + (c.v_norm ? " v_norm" : "") + (c.v_from_k ? " v_from_k" : "") +
                             (c.q_only ? " q_only" : "");
    gpu::qk_rope_kv_rows(s, a, T, pos0, dqkv.as<const float>(), qo.as<float>(), kc.data(), vc.data());
    s.sync();
    const std::vector<float> q_rows = to_host<float>(qo, static_cast<size_t>(T * qn));
    for (int t = 0; t < T; ++t) {
      const gpu::StepArgs sa{0, pos0 + t};
      args.upload(&sa, sizeof sa);
      gpu::qkv_heads(s, a, dqkv.as<const float>() + t * wq, args.as<const gpu::StepArgs>(), qo2.as<float>(), kc2.data(),
                     vc2.data());
      s.sync();
      const std::vector<float> q1 = to_host<float>(qo2, static_cast<size_t>(qn));
      for (int64_t i = 0; i < qn; ++i) ASSERT_EQ(q_rows[t * qn + i], q1[i]) << "q row " << t << " at " << i << ", " << what;
    }
    const std::vector<uint16_t> k_rows = to_host<uint16_t>(kc, kvn), v_rows = to_host<uint16_t>(vc, kvn);
    EXPECT_EQ(k_rows, to_host<uint16_t>(kc2, kvn)) << what;
    EXPECT_EQ(v_rows, to_host<uint16_t>(vc2, kvn)) << what;
    const uint16_t sent = static_cast<uint16_t>(kSentinel << 8 | kSentinel);
    for (size_t i = 0; i < kvn; ++i) {
      const bool written = !c.q_only && i >= static_cast<size_t>(pos0) * kn;  // rows pos0..pos0+T-1 only
      if (!written) {
        ASSERT_EQ(k_rows[i], sent) << "K element " << i << " written, " << what;
        ASSERT_EQ(v_rows[i], sent) << "V element " << i << " written, " << what;
      }
    }
    if (c.q_only) {  // no caches at all (a KV-shared layer owns none)
      gpu::qk_rope_kv_rows(s, a, T, pos0, dqkv.as<const float>(), qo.as<float>(), nullptr, nullptr);
      s.sync();
      EXPECT_EQ(to_host<float>(qo, static_cast<size_t>(T * qn)), q_rows) << what;
      continue;
    }
    // V against the CPU: the raw k (v_from_k) or v slot, scale-less rmsnorm when v_norm.
    const gpu::GemmType rt = c.kv == gpu::KVElem::F16 ? gpu::GemmType::F16 : gpu::GemmType::BF16;
    const float u = c.kv == gpu::KVElem::F16 ? 1.0f / 2048 : 1.0f / 256;
    for (int t = 0; t < T; ++t) {
      const float* r = qkv.data() + t * wq;
      std::vector<float> v(r + qn + (c.v_from_k ? 0 : kn), r + qn + (c.v_from_k ? 0 : kn) + kn);
      if (c.v_norm) ops::rmsnorm(v.data(), c.nkv, c.hd, nullptr, DType::F32, 0.0f, eps, v.data());
      float R = 0.0f;
      for (float x : v) R = std::max(R, std::fabs(x));
      for (int64_t i = 0; i < kn; ++i) {
        const float got = from16(v_rows[static_cast<size_t>(pos0 + t) * kn + i], rt);
        if (c.v_norm) {
          ASSERT_NEAR(got, v[i], u * std::fabs(v[i]) + 1.1e-5f * R) << "v row " << t << " at " << i << ", " << what;
        } else {
          ASSERT_EQ(v_rows[static_cast<size_t>(pos0 + t) * kn + i], round16(v[i], rt)) << "v row " << t << ", " << what;
        }
      }
    }
  }

  // residual_norm_rows: layer_scalar (scale != 1) with and without the next norm.
  const int64_t H = 1536;
  const std::vector<float> x = random_vec(static_cast<size_t>(T * H), 71, 3.0f), proj = random_vec(static_cast<size_t>(T * H), 72);
  const std::vector<float> w1 = around_one(H, 73), w2 = around_one(H, 74);
  gpu::DeviceBuffer dp = to_device(proj), dw1 = to_device(w1), dw2 = to_device(w2);
  for (gpu::GemmType gt : {gpu::GemmType::BF16, gpu::GemmType::F16}) {
    for (const bool next : {true, false}) {
      const float scale = next ? 0.8125f : 0.55f;
      gpu::DeviceBuffer h16(static_cast<size_t>(T * H) * 2), xr = to_device(x), x1 = to_device(x), y1(static_cast<size_t>(H) * 4);
      const float* wn = next ? dw2.as<const float>() : nullptr;
      gpu::residual_norm_rows(s, T, H, xr.as<float>(), dp.as<const float>(), dw1.as<const float>(), wn, 0.0f, eps, gt,
                              h16.data(), scale);
      s.sync();
      const std::vector<uint16_t> hr = to_host<uint16_t>(h16, static_cast<size_t>(T * H));
      const std::vector<float> xrh = to_host<float>(xr, static_cast<size_t>(T * H));
      for (int t = 0; t < T; ++t) {
        gpu::residual_norm(s, H, x1.as<float>() + t * H, dp.as<const float>() + t * H, dw1.as<const float>(), wn, 0.0f, eps,
                           y1.as<float>(), nullptr, scale);
        s.sync();
        const std::vector<float> y = to_host<float>(y1, static_cast<size_t>(H));
        for (int64_t i = 0; i < H; ++i) {
          ASSERT_EQ(hr[t * H + i], round16(y[i], gt)) << "residual_norm row " << t << " next " << next;
          if (!next) {
            ASSERT_EQ(hr[t * H + i], round16(xrh[t * H + i], gt)) << "h = x, row " << t;
          }
        }
      }
      EXPECT_EQ(xrh, to_host<float>(x1, static_cast<size_t>(T * H))) << "next " << next;
    }
  }
}

TEST(CudaPrefillKernels, BadShapesThrow) {
  SKIP_WITHOUT_GPU();
  gpu::Stream s;
  gpu::AttentionArgs a;
  a.n_heads = 3;
  a.n_kv_heads = 2;  // not a divisor
  a.head_dim = 64;
  EXPECT_THROW(gpu::attention_prefill(s, a, 4, 0, nullptr, nullptr, nullptr, gpu::GemmType::BF16, nullptr), Error);
  a.n_kv_heads = 1;
  a.head_dim = 48;
  EXPECT_THROW(gpu::attention_prefill(s, a, 4, 0, nullptr, nullptr, nullptr, gpu::GemmType::BF16, nullptr), Error);
  gpu::Gemm g(s);
  EXPECT_THROW(g.run(gpu::GemmType::BF16, nullptr, 8, 8, nullptr, 4, nullptr, 4), Error);  // ldy < N
  EXPECT_THROW(g.run(gpu::GemmType::F32, nullptr, 8, 8, nullptr, 4, nullptr, 4), Error);
  // The 16-bit conversions do not take F32 (prefill.h).
  EXPECT_THROW(gpu::residual_norm_rows(s, 2, 64, nullptr, nullptr, nullptr, nullptr, 0.0f, 1e-6f, gpu::GemmType::F32, nullptr),
               Error);
}

}  // namespace
}  // namespace eg
