// The Q6_Kx16 and F32x16 packed layouts (backend/cpu/packed.h, packed_q6k.cpp):
//   - Q6_K packing is lossless (unpack_row gives back every original byte);
//   - the scalar reference on the packed layout equals an independent int64 re-computation from
//     the original GGUF blocks (codes read as ggml's dequantize_row_q6_K documents them, no bsums)
//     and qdot on the unpacked rows, bit for bit;
//   - the AVX-512 VNNI kernel equals the reference bit for bit at T = 1..17 and several row ranges;
//   - ops::matmul with the packed Q6_K weight equals the unpacked one at any T and thread count;
//   - F32x16: lossless, the machine kernel equals the scalar fma chain bit for bit, and is within
//     1e-6·Σ|w·x| of float64, independent of T and threads;
//   - whole models packed vs unpacked (tiny-gemma3 F32, tiny-gemma4 Q4_0: Q6_K LM head, F32
//     per-layer projection); the Q6_K LM head alone: packed_kernels_test (tiny-gemma3 Q4_0, bit for bit).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/packed.h"
#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/thread_pool.h"
#include "engine/loaded_model.h"
#include "engine/session.h"
#include "ops/ops.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "test_util.h"

namespace {

// Q6_K packing is on by default (packed_by_default) unless EDGEGEMMA_REPACK_Q6K=0 is set; this
// binary sets it to 1 before anything reads it, so the packed path is tested in any environment.
const bool kQ6KOn = (setenv("EDGEGEMMA_REPACK_Q6K", "1", 1), true);

using eg::DType;
using eg::quant::BlockQ6_K;
using eg::quant::BlockQ8_K;

std::vector<float> randn(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = d(rng);
    if (x == 0.0f) x = 0.25f * scale;
  }
  return v;
}

std::vector<uint8_t> q6k_weights(int64_t N, int64_t K, uint32_t seed) {
  const auto x = randn(static_cast<size_t>(N * K), seed, 0.05f);
  const size_t rb = eg::dtype_row_bytes(DType::Q6_K, K);
  std::vector<uint8_t> q(rb * N);
  for (int64_t n = 0; n < N; ++n) eg::quant::quantize_row(DType::Q6_K, x.data() + n * K, K, q.data() + n * rb);
  return q;
}

std::vector<uint8_t> packed_copy(DType t, const std::vector<uint8_t>& q, int64_t N, int64_t K) {
  std::vector<uint8_t> p(eg::cpu::packed_bytes(t, N, K));
  eg::cpu::pack_groups(t, q.data(), N, K, 0, N / eg::cpu::kPackRows, p.data());
  return p;
}

std::vector<uint8_t> q8k_rows(int64_t T, int64_t K, uint32_t seed) {
  const auto x = randn(static_cast<size_t>(T * K), seed, 1.0f);
  const size_t ab = eg::cpu::act_row_bytes(DType::Q6_K, K);
  std::vector<uint8_t> a(ab * T);
  for (int64_t i = 0; i < T; ++i) eg::cpu::quantize_act_row(DType::Q6_K, x.data() + i * K, K, a.data() + i * ab);
  return a;
}

// Independent: element codes as ggml's dequantize_row_q6_K reads them (per 128-half: ql, qh, and
// the scale index l/16 + 0, 2, 4, 6), the signed weight code (q − 32) times its scale and x in
// int64, then the row kernel's float step acc + (d·d_x)·float(isum).
float direct_dot(const uint8_t* row, const BlockQ8_K* a, int64_t K) {
  const auto* blocks = reinterpret_cast<const BlockQ6_K*>(row);
  float acc = 0.0f;
  for (int64_t b = 0; b < K / 256; ++b) {
    const BlockQ6_K& blk = blocks[b];
    int64_t isum = 0;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = blk.ql + 64 * h;
      const uint8_t* qh = blk.qh + 32 * h;
      const int8_t* sc = blk.scales + 8 * h;
      const int8_t* x = a[b].qs + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        isum += static_cast<int64_t>(sc[is]) * q1 * x[l] + static_cast<int64_t>(sc[is + 2]) * q2 * x[l + 32] +
                static_cast<int64_t>(sc[is + 4]) * q3 * x[l + 64] + static_cast<int64_t>(sc[is + 6]) * q4 * x[l + 96];
      }
    }
    acc = acc + (eg::f16_to_f32(blk.d) * a[b].d) * static_cast<float>(isum);
  }
  return acc;
}

TEST(PackedQ6K, PackingIsLossless) {
  const int64_t N = 48, K = 512;
  const auto q = q6k_weights(N, K, 7);
  const auto p = packed_copy(DType::Q6_K, q, N, K);
  EXPECT_EQ(p.size(), q.size());
  const size_t rb = eg::dtype_row_bytes(DType::Q6_K, K);
  std::vector<uint8_t> row(rb);
  for (int64_t n = 0; n < N; ++n) {
    eg::cpu::unpack_row(DType::Q6_K, p.data(), N, K, n, row.data());
    ASSERT_EQ(std::memcmp(row.data(), q.data() + n * rb, rb), 0) << "row " << n;
  }
  EXPECT_TRUE(eg::cpu::packable(DType::Q6_K, 16, 256));
  EXPECT_FALSE(eg::cpu::packable(DType::Q6_K, 16, 128));  // not whole 256-blocks
  EXPECT_FALSE(eg::cpu::packable(DType::Q6_K, 24, 256));
}

TEST(PackedQ6K, ReferenceEqualsDirectDotAndQdot) {
  const int64_t N = 32, K = 768, T = 3;
  const auto q = q6k_weights(N, K, 11);
  const auto p = packed_copy(DType::Q6_K, q, N, K);
  const auto a = q8k_rows(T, K, 12);
  const size_t ab = eg::cpu::act_row_bytes(DType::Q6_K, K), rb = eg::dtype_row_bytes(DType::Q6_K, K);
  std::vector<float> y(T * N, NAN);
  eg::cpu::packed_gemm_reference(DType::Q6_K, p.data(), K, 0, N, a.data(), ab, T, y.data(), N);
  for (int64_t i = 0; i < T; ++i) {
    const auto* ai = reinterpret_cast<const BlockQ8_K*>(a.data() + i * ab);
    for (int64_t n = 0; n < N; ++n) {
      const float direct = direct_dot(q.data() + n * rb, ai, K);
      ASSERT_NE(direct, 0.0f);
      ASSERT_EQ(y[i * N + n], direct) << "t " << i << " n " << n;
      ASSERT_EQ(eg::cpu::qdot(DType::Q6_K, q.data() + n * rb, ai, K), direct) << "qdot t " << i << " n " << n;
    }
  }
}

TEST(PackedQ6K, MachineKernelEqualsReference) {
  if (!eg::cpu::packed_available(DType::Q6_K)) GTEST_SKIP() << "no packed kernel on this machine";
  const int64_t N = 112, K = 768;
  const auto q = q6k_weights(N, K, 21);
  const auto p = packed_copy(DType::Q6_K, q, N, K);
  const size_t ab = eg::cpu::act_row_bytes(DType::Q6_K, K);
  for (int64_t T : {1, 2, 3, 4, 5, 7, 17}) {
    const auto a = q8k_rows(T, K, 22 + static_cast<uint32_t>(T));
    for (auto [n0, n1] : {std::pair<int64_t, int64_t>{0, N}, {16, 64}, {96, 112}}) {
      std::vector<float> ref(T * N, -1.0f), got(T * N, -1.0f);
      eg::cpu::packed_gemm_reference(DType::Q6_K, p.data(), K, n0, n1, a.data(), ab, T, ref.data(), N);
      eg::cpu::packed_gemm(DType::Q6_K, p.data(), K, n0, n1, a.data(), ab, T, got.data(), N);
      ASSERT_EQ(std::memcmp(ref.data(), got.data(), ref.size() * sizeof(float)), 0)
          << "T " << T << " rows " << n0 << ".." << n1;
    }
  }
}

TEST(PackedQ6K, MatmulPackedEqualsUnpackedAtAnyTAndThreadCount) {
  if (!eg::cpu::packed_available(DType::Q6_K)) GTEST_SKIP() << "no packed kernel on this machine";
  const int64_t N = 208, K = 512;
  const auto q = q6k_weights(N, K, 31);
  const auto p = packed_copy(DType::Q6_K, q, N, K);
  eg::ops::Weight plain{q.data(), DType::Q6_K, N, K};
  eg::ops::Weight packed = plain;
  packed.packed = p.data();
  for (int64_t T : {1, 4, 13, 40}) {
    const auto x = randn(static_cast<size_t>(T * K), 40 + static_cast<uint32_t>(T), 1.0f);
    std::vector<float> y0(T * N), y1(T * N);
    eg::ops::matmul(x.data(), T, plain, y0.data());
    for (int threads : {1, 2, 3}) {
      eg::cpu::set_num_threads(threads);
      eg::ops::matmul(x.data(), T, packed, y1.data());
      ASSERT_EQ(std::memcmp(y0.data(), y1.data(), y0.size() * sizeof(float)), 0)
          << "T " << T << " threads " << threads;
    }
    eg::cpu::set_num_threads(0);
  }
}

TEST(PackedF32, MatchesReferenceAndFloat64) {
  if (!eg::cpu::packed_available(DType::F32)) GTEST_SKIP() << "no packed kernel on this machine";
  const int64_t N = 96, K = 224;
  const auto w = randn(static_cast<size_t>(N * K), 51, 0.05f);
  std::vector<uint8_t> q(w.size() * 4);
  std::memcpy(q.data(), w.data(), q.size());
  const auto p = packed_copy(DType::F32, q, N, K);
  ASSERT_EQ(p.size(), q.size());
  std::vector<uint8_t> row(4 * K);
  for (int64_t n = 0; n < N; ++n) {
    eg::cpu::unpack_row(DType::F32, p.data(), N, K, n, row.data());
    ASSERT_EQ(std::memcmp(row.data(), q.data() + n * 4 * K, 4 * K), 0) << n;
  }
  eg::ops::Weight W{q.data(), DType::F32, N, K};
  W.packed = p.data();
  for (int64_t T : {1, 3, 8, 11, 17}) {
    const auto x = randn(static_cast<size_t>(T * K), 60 + static_cast<uint32_t>(T), 1.0f);
    for (auto [n0, n1] : {std::pair<int64_t, int64_t>{0, N}, {16, 48}, {80, 96}}) {
      std::vector<float> ref(T * N, -1.0f), got(T * N, -1.0f);
      eg::cpu::packed_gemm_float_reference(DType::F32, p.data(), K, n0, n1, x.data(), T, ref.data(), N);
      eg::cpu::packed_gemm_float(DType::F32, p.data(), K, n0, n1, x.data(), T, got.data(), N);
      ASSERT_EQ(std::memcmp(ref.data(), got.data(), ref.size() * sizeof(float)), 0)
          << "T " << T << " rows " << n0 << ".." << n1;
    }
    std::vector<float> ref(T * N), got(T * N);
    eg::cpu::packed_gemm_float_reference(DType::F32, p.data(), K, 0, N, x.data(), T, ref.data(), N);
    for (int threads : {1, 2, 3}) {
      eg::cpu::set_num_threads(threads);
      eg::ops::matmul(x.data(), T, W, got.data());
      ASSERT_EQ(std::memcmp(ref.data(), got.data(), ref.size() * sizeof(float)), 0) << "matmul T " << T;
    }
    eg::cpu::set_num_threads(0);
    for (int64_t i = 0; i < T; ++i)
      for (int64_t n = 0; n < N; ++n) {
        double r = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          r += static_cast<double>(w[n * K + k]) * x[i * K + k];
          mag += std::fabs(static_cast<double>(w[n * K + k]) * x[i * K + k]);
        }
        ASSERT_NEAR(got[i * N + n], r, 1e-6 * mag + 1e-12) << "t " << i << " n " << n;
      }
  }
}

// Whole models, packed (LoadedModel::load) against the same file unpacked (load_files):
//   tiny-gemma3 F32 GGUF: every matmul weight F32x16, so only f32 dot-product rounding differs:
//     logits within 1e-5 of their largest magnitude;
//   tiny-gemma4 Q4_0: Q6_K LM head (bit-identical) and F32 per-layer model projection (its output
//     within 1e-6 relative, PackedF32 above), but the Q4_0 layers quantize activations to int8
//     and the per-layer slices are RMS-normalised over 64 values, so a last-bit change can move
//     an activation code by one: logits within 1e-2 of their largest magnitude (0.8% measured).
void expect_packed_close(const std::string& path, float rel) {
  auto packed = eg::LoadedModel::load(path);
  auto plain = eg::LoadedModel::load_files(path);
  const std::vector<int32_t> ids = packed->encode_prompt("It is a truth universally acknowledged", false);
  std::vector<float> la, lb;
  for (auto* lm : {packed.get(), plain.get()}) {
    eg::KVCacheOptions opt;
    opt.max_tokens = 256;
    auto kv = lm->executor().new_kv_cache(opt);
    auto ws = lm->executor().new_workspace();
    std::vector<float>& out = lm == packed.get() ? la : lb;
    lm->executor().prefill(ids.data(), static_cast<int>(ids.size()), *kv, *ws, eg::LogitsMode::All, out);
  }
  ASSERT_EQ(la.size(), lb.size());
  float scale = 0.0f, worst = 0.0f;
  for (float v : lb) scale = std::max(scale, std::fabs(v));
  ASSERT_GT(scale, 0.0f);
  for (size_t i = 0; i < la.size(); ++i) worst = std::max(worst, std::fabs(la[i] - lb[i]));
  std::printf("%s: max |packed - unpacked| = %g (largest logit %g)\n", path.c_str(), worst, scale);
  EXPECT_LE(worst, rel * scale) << path;
}

// tiny-gemma3 Q4_0: Q4_0 layers and a Q6_K LM head, both packed: bit-identical logits.
TEST(PackedQ6K, Gemma3ModelLogitsArePackedInvariant) {
  ASSERT_TRUE(kQ6KOn);
  const std::string path = egtest::shared_dir() + "/models/gguf/tiny-gemma3/tiny-gemma3-q4_0.gguf";
  auto packed = eg::LoadedModel::load(path);
  auto plain = eg::LoadedModel::load_files(path);
  ASSERT_EQ(packed->model().weights().embed.dtype, DType::Q6_K);
  EXPECT_EQ(packed->model().weights().embed.packed != nullptr, eg::cpu::packed_available(DType::Q6_K));
  const std::vector<int32_t> ids = packed->encode_prompt("It is a truth universally acknowledged", false);
  std::vector<float> la, lb;
  for (auto* lm : {packed.get(), plain.get()}) {
    eg::KVCacheOptions opt;
    opt.max_tokens = 256;
    auto kv = lm->executor().new_kv_cache(opt);
    auto ws = lm->executor().new_workspace();
    std::vector<float>& out = lm == packed.get() ? la : lb;
    lm->executor().prefill(ids.data(), static_cast<int>(ids.size()), *kv, *ws, eg::LogitsMode::All, out);
    // and one decode step (T = 1: the GEMV path of the LM head)
    const int32_t next = ids.back();
    std::vector<float> step;
    lm->executor().prefill(&next, 1, *kv, *ws, eg::LogitsMode::All, step);
    out.insert(out.end(), step.begin(), step.end());
  }
  ASSERT_EQ(la.size(), lb.size());
  ASSERT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0);
}

TEST(PackedQ6K, ModelsPackedMatchUnpacked) {
  const std::string dir = egtest::shared_dir() + "/models/gguf/";
  {
    auto lm = eg::LoadedModel::load(dir + "tiny-gemma4/tiny-gemma4-q4_0.gguf");
    const auto& w = lm->model().weights();
    ASSERT_EQ(w.embed.dtype, DType::Q6_K);
    EXPECT_EQ(w.embed.packed != nullptr, eg::cpu::packed_by_default(DType::Q6_K));
    ASSERT_EQ(w.ple_model_proj.dtype, DType::F32);
    EXPECT_EQ(w.ple_model_proj.packed != nullptr, eg::cpu::packed_available(DType::F32));
  }
  expect_packed_close(dir + "tiny-gemma3/tiny-gemma3-f32.gguf", 1e-5f);
  expect_packed_close(dir + "tiny-gemma4/tiny-gemma4-q4_0.gguf", 1e-2f);
}

}  // namespace
