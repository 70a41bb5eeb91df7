// Packed (interleaved) weight layouts and their kernels (backend/cpu/packed.h):
//   - packing is lossless (unpack_row gives back every original byte);
//   - the scalar reference on the packed layout equals an independent int64/double-free
//     re-computation from the original blocks, and qdot on the unpacked rows, bit for bit;
//   - the machine kernels (AVX-512 VNNI; AMX-INT8, opt-in, for full 16-token tiles) equal the
//     reference bit for bit for every T and row range;
//   - ops::matmul with Weight::packed equals ops::matmul without it, for any T and thread count;
//   - a whole model (tiny-gemma3 Q4_0 / Q8_0 GGUF) gives the same logits packed and unpacked.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "backend/cpu/packed.h"
#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "engine/loaded_model.h"
#include "engine/session.h"
#include "ops/ops.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "test_util.h"

namespace {

using eg::DType;

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

std::vector<uint8_t> quantized(DType t, int64_t N, int64_t K, uint32_t seed) {
  const auto x = randn(static_cast<size_t>(N * K), seed, 0.05f);
  const size_t rb = eg::dtype_row_bytes(t, K);
  std::vector<uint8_t> q(rb * N);
  for (int64_t n = 0; n < N; ++n) eg::quant::quantize_row(t, x.data() + n * K, K, q.data() + n * rb);
  return q;
}

std::vector<uint8_t> packed_copy(DType t, const std::vector<uint8_t>& q, int64_t N, int64_t K) {
  std::vector<uint8_t> p(eg::cpu::packed_bytes(t, N, K));
  eg::cpu::pack_groups(t, q.data(), N, K, 0, N / eg::cpu::kPackRows, p.data());
  return p;
}

std::vector<uint8_t> act_rows(DType t, int64_t T, int64_t K, uint32_t seed) {
  const auto x = randn(static_cast<size_t>(T * K), seed, 1.0f);
  const size_t ab = eg::cpu::act_row_bytes(t, K);
  std::vector<uint8_t> a(ab * T);
  for (int64_t i = 0; i < T; ++i) eg::cpu::quantize_act_row(t, x.data() + i * K, K, a.data() + i * ab);
  return a;
}

// Independent re-computation from the ORIGINAL (unpacked) GGUF blocks: the signed codes are
// read the way ggml-common.h documents them, the integer sum in int64, the float chain with fmaf.
float direct_dot(DType t, const uint8_t* row, const eg::cpu::ActQ8* a, int64_t K) {
  float acc = 0.0f;
  for (int64_t b = 0; b < K / 32; ++b) {
    int64_t isum = 0;
    uint16_t d16;
    if (t == DType::Q4_0) {
      const auto& blk = reinterpret_cast<const eg::quant::BlockQ4_0*>(row)[b];
      d16 = blk.d;
      for (int i = 0; i < 16; ++i) {
        isum += static_cast<int64_t>((blk.qs[i] & 0x0F) - 8) * a[b].qs[i];
        isum += static_cast<int64_t>((blk.qs[i] >> 4) - 8) * a[b].qs[i + 16];
      }
    } else {
      const auto& blk = reinterpret_cast<const eg::quant::BlockQ8_0*>(row)[b];
      d16 = blk.d;
      for (int i = 0; i < 32; ++i) isum += static_cast<int64_t>(blk.qs[i]) * a[b].qs[i];
    }
    acc = std::fmaf(eg::f16_to_f32(d16) * a[b].d, static_cast<float>(isum), acc);
  }
  return acc;
}

const DType kTypes[] = {DType::Q4_0, DType::Q8_0};

TEST(PackedKernels, PackingIsLossless) {
  for (DType t : kTypes) {
    const int64_t N = 48, K = 96;
    const auto q = quantized(t, N, K, 7);
    const auto p = packed_copy(t, q, N, K);
    EXPECT_EQ(p.size(), q.size());
    const size_t rb = eg::dtype_row_bytes(t, K);
    std::vector<uint8_t> row(rb);
    for (int64_t n = 0; n < N; ++n) {
      eg::cpu::unpack_row(t, p.data(), N, K, n, row.data());
      ASSERT_EQ(std::memcmp(row.data(), q.data() + n * rb, rb), 0) << eg::dtype_name(t) << " row " << n;
    }
  }
}

TEST(PackedKernels, ReferenceEqualsDirectDotAndQdot) {
  for (DType t : kTypes) {
    const int64_t N = 32, K = 160, T = 3;
    const auto q = quantized(t, N, K, 11);
    const auto p = packed_copy(t, q, N, K);
    const auto a = act_rows(t, T, K, 12);
    const size_t ab = eg::cpu::act_row_bytes(t, K), rb = eg::dtype_row_bytes(t, K);
    std::vector<float> y(T * N, NAN);
    eg::cpu::packed_gemm_reference(t, p.data(), K, 0, N, a.data(), ab, T, y.data(), N);
    for (int64_t i = 0; i < T; ++i) {
      const auto* ai = reinterpret_cast<const eg::cpu::ActQ8*>(a.data() + i * ab);
      for (int64_t n = 0; n < N; ++n) {
        const float direct = direct_dot(t, q.data() + n * rb, ai, K);
        const float qd = eg::cpu::qdot(t, q.data() + n * rb, ai, K);
        ASSERT_NE(direct, 0.0f);
        ASSERT_EQ(y[i * N + n], direct) << eg::dtype_name(t) << " t " << i << " n " << n;
        ASSERT_EQ(qd, direct) << eg::dtype_name(t) << " qdot t " << i << " n " << n;
      }
    }
  }
}

TEST(PackedKernels, MachineKernelEqualsReference) {
  for (DType t : kTypes) {
    if (!eg::cpu::packed_available(t)) GTEST_SKIP() << "no packed kernel on this machine";
    const int64_t N = 112, K = 320;  // 7 groups: decode runs 4 + 2 + 1 groups, prefill 3 pairs + 1
    const auto q = quantized(t, N, K, 21);
    const auto p = packed_copy(t, q, N, K);
    for (int64_t T : {1, 2, 5, 8, 9, 16, 17, 33, 48}) {
      const auto a = act_rows(t, T, K, 22 + static_cast<uint32_t>(T));
      const size_t ab = eg::cpu::act_row_bytes(t, K);
      for (auto [n0, n1] : {std::pair<int64_t, int64_t>{0, N}, {16, 64}, {96, 112}}) {
        std::vector<float> ref(T * N, -1.0f), got(T * N, -1.0f);
        eg::cpu::packed_gemm_reference(t, p.data(), K, n0, n1, a.data(), ab, T, ref.data(), N);
        eg::cpu::packed_gemm(t, p.data(), K, n0, n1, a.data(), ab, T, got.data(), N);
        ASSERT_EQ(std::memcmp(ref.data(), got.data(), ref.size() * sizeof(float)), 0)
            << eg::dtype_name(t) << " T " << T << " rows " << n0 << ".." << n1;
      }
    }
  }
}

// The AMX-INT8 prefill kernel (packed_amx.cpp) on its own: it takes the full 16-token tiles and
// reports how many; every one of its outputs equals the independent int64 re-computation from the
// original blocks, bit for bit. Odd and even block counts (the kernel alternates two tile sets),
// one and several groups, a row range that starts past group 0. Skipped without AMX.
TEST(PackedKernels, AmxKernelEqualsDirectDot) {
  if (!eg::cpu::packed_amx_supported()) GTEST_SKIP() << "no AMX-INT8 on this machine";
  for (DType t : kTypes) {
    for (int64_t K : {224, 1152}) {
      const int64_t N = 48;
      const auto q = quantized(t, N, K, 61 + static_cast<uint32_t>(K));
      const auto p = packed_copy(t, q, N, K);
      const size_t ab = eg::cpu::act_row_bytes(t, K), rb = eg::dtype_row_bytes(t, K);
      for (int64_t T : {15, 16, 37}) {
        const auto a = act_rows(t, T, K, 62 + static_cast<uint32_t>(T));
        for (auto [n0, n1] : {std::pair<int64_t, int64_t>{0, N}, {16, 32}}) {
          std::vector<float> got(T * N, -1.0f);
          const int64_t done = eg::cpu::packed_gemm_amx(t, p.data(), K, n0, n1, a.data(), ab, T, got.data(), N);
          ASSERT_EQ(done, T / 16 * 16) << eg::dtype_name(t) << " T " << T;
          for (int64_t i = 0; i < T; ++i) {
            const auto* ai = reinterpret_cast<const eg::cpu::ActQ8*>(a.data() + i * ab);
            for (int64_t n = 0; n < N; ++n) {
              if (i >= done || n < n0 || n >= n1) {
                ASSERT_EQ(got[i * N + n], -1.0f) << "wrote outside its tiles: t " << i << " n " << n;
                continue;
              }
              const float direct = direct_dot(t, q.data() + n * rb, ai, K);
              ASSERT_NE(direct, 0.0f);
              ASSERT_EQ(got[i * N + n], direct) << eg::dtype_name(t) << " K " << K << " t " << i << " n " << n;
            }
          }
        }
      }
    }
  }
}

TEST(PackedKernels, MatmulPackedEqualsUnpackedAtAnyTAndThreadCount) {
  for (DType t : kTypes) {
    if (!eg::cpu::packed_available(t)) GTEST_SKIP() << "no packed kernel on this machine";
    const int64_t N = 208, K = 256;
    const auto q = quantized(t, N, K, 31);
    const auto p = packed_copy(t, q, N, K);
    eg::ops::Weight plain{q.data(), t, N, K};
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
            << eg::dtype_name(t) << " T " << T << " threads " << threads;
      }
      eg::cpu::set_num_threads(0);
    }
  }
}

// A packed task of more than 48 M MACs (64 rows × T × K) splits its tokens into chunks of a
// multiple of 16 (ops/matmul.cpp): here 64 × 203 × 4096 → chunks of 112 and 91 tokens, and a row
// range of 16 rows after the first 64. The results stay those of the unpacked weight bit for bit.
TEST(PackedKernels, MatmulTokenChunksOfLongTasksAreBitIdentical) {
  for (DType t : kTypes) {
    if (!eg::cpu::packed_available(t)) GTEST_SKIP() << "no packed kernel on this machine";
    const int64_t N = 80, K = 4096;
    const auto q = quantized(t, N, K, 33);
    const auto p = packed_copy(t, q, N, K);
    eg::ops::Weight plain{q.data(), t, N, K};
    eg::ops::Weight packed = plain;
    packed.packed = p.data();
    for (int64_t T : {200, 203}) {
      const auto x = randn(static_cast<size_t>(T * K), 50 + static_cast<uint32_t>(T), 1.0f);
      std::vector<float> y0(T * N), y1(T * N);
      eg::ops::matmul(x.data(), T, plain, y0.data());
      for (int threads : {1, 2, 3}) {
        eg::cpu::set_num_threads(threads);
        std::fill(y1.begin(), y1.end(), -1.0f);
        eg::ops::matmul(x.data(), T, packed, y1.data());
        ASSERT_EQ(std::memcmp(y0.data(), y1.data(), y0.size() * sizeof(float)), 0)
            << eg::dtype_name(t) << " T " << T << " threads " << threads;
      }
      eg::cpu::set_num_threads(0);
    }
  }
}

// matmul_gelu_mul (the MLP's down projection: each GeGLU row formed and quantized at once) equals
// gelu_tanh_mul into a buffer then matmul, bit for bit: packed and unpacked Q4_0 / Q8_0, a K-quant
// (its own activation type), F32 (the fallback), several T and thread counts.
TEST(PackedKernels, MatmulGeluMulEqualsGeluThenMatmul) {
  const int64_t N = 48, K = 512;
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::F32}) {
    std::vector<uint8_t> q;
    if (t == DType::F32) {
      const auto w = randn(static_cast<size_t>(N * K), 61, 0.05f);
      q.resize(w.size() * sizeof(float));
      std::memcpy(q.data(), w.data(), q.size());
    } else {
      q = quantized(t, N, K, 61);
    }
    std::vector<uint8_t> p;
    eg::ops::Weight W{q.data(), t, N, K};
    for (bool pk : {false, true}) {
      if (pk && !(eg::cpu::packable(t, N, K) && eg::cpu::packed_available(t))) continue;
      if (pk) {
        p = packed_copy(t, q, N, K);
        W.packed = p.data();
      }
      for (int64_t T : {1, 5, 37}) {
        const auto gate = randn(static_cast<size_t>(T * K), 70 + static_cast<uint32_t>(T), 1.0f);
        const auto up = randn(static_cast<size_t>(T * K), 80 + static_cast<uint32_t>(T), 1.0f);
        std::vector<float> prod(gate.size()), want(T * N);
        eg::ops::gelu_tanh_mul(gate.data(), up.data(), T * K, prod.data());
        eg::ops::matmul(prod.data(), T, W, want.data());
        for (int threads : {1, 2, 3}) {
          eg::cpu::set_num_threads(threads);
          std::vector<float> g = gate, y(T * N, -1.0f);
          eg::ops::matmul_gelu_mul(g.data(), up.data(), T, W, y.data());
          ASSERT_EQ(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)), 0)
              << eg::dtype_name(t) << (pk ? " packed" : "") << " T " << T << " threads " << threads;
        }
        eg::cpu::set_num_threads(0);
      }
    }
  }
}

TEST(PackedKernels, ShapesWithoutALayoutAreRefused) {
  EXPECT_FALSE(eg::cpu::packable(DType::Q4_0, 20, 64));   // rows not a multiple of 16
  EXPECT_FALSE(eg::cpu::packable(DType::Q4_K, 16, 256));  // no layout for the type
  EXPECT_TRUE(eg::cpu::packable(DType::Q8_0, 32, 64));
  std::vector<uint8_t> src(20 * eg::dtype_row_bytes(DType::Q4_0, 64)), dst(src.size());
  EXPECT_THROW(eg::cpu::pack_groups(DType::Q4_0, src.data(), 20, 64, 0, 1, dst.data()), eg::Error);
  // Rows outside the weight, or a weight without a layout, are errors, not reads past the buffer.
  std::vector<uint8_t> p16(eg::cpu::packed_bytes(DType::Q8_0, 16, 64)), row(eg::dtype_row_bytes(DType::Q8_0, 64));
  EXPECT_THROW(eg::cpu::unpack_row(DType::Q8_0, p16.data(), 16, 64, 16, row.data()), eg::Error);
  EXPECT_THROW(eg::cpu::unpack_row(DType::Q8_0, p16.data(), 16, 64, -1, row.data()), eg::Error);
  EXPECT_THROW(eg::cpu::unpack_row(DType::Q4_K, p16.data(), 16, 256, 0, row.data()), eg::Error);
}

// F16 / BF16 packed weights: the machine kernel equals the scalar fma-chain reference bit for
// bit; ops::matmul with them is within f32 dot-product rounding of a float64 reference, and does
// not depend on T or the thread count.
std::vector<uint8_t> half_weights(DType t, int64_t N, int64_t K, uint32_t seed, std::vector<double>* w64) {
  const auto x = randn(static_cast<size_t>(N * K), seed, 0.05f);
  std::vector<uint8_t> q(static_cast<size_t>(N * K) * 2);
  w64->resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    uint16_t h = t == DType::F16 ? eg::f32_to_f16(x[i]) : eg::f32_to_bf16(x[i]);
    std::memcpy(q.data() + 2 * i, &h, 2);
    (*w64)[i] = t == DType::F16 ? eg::f16_to_f32(h) : eg::bf16_to_f32(h);
  }
  return q;
}

TEST(PackedKernels, FloatLayoutsMatchReferenceAndFloat64) {
  // N = 96 and 80: an even and an odd number of 16-row groups (the prefill tile takes groups in
  // pairs); T up to 50: tiles of 12, 8, 4, 2 and 1 tokens and a second 48-token tile.
  for (const auto& [t, N] : {std::pair{DType::F16, int64_t{96}}, std::pair{DType::BF16, int64_t{96}},
                             std::pair{DType::BF16, int64_t{80}}}) {
    if (!eg::cpu::packed_available(t)) GTEST_SKIP() << "no packed kernel on this machine";
    const int64_t K = 192;
    std::vector<double> w64;
    const auto q = half_weights(t, N, K, 51, &w64);
    const auto p = packed_copy(t, q, N, K);
    std::vector<uint8_t> row(2 * K);
    for (int64_t n = 0; n < N; ++n) {
      eg::cpu::unpack_row(t, p.data(), N, K, n, row.data());
      ASSERT_EQ(std::memcmp(row.data(), q.data() + n * 2 * K, 2 * K), 0) << n;
    }
    eg::ops::Weight W{q.data(), t, N, K};
    W.packed = p.data();
    for (int64_t T : {1, 3, 8, 11, 12, 29, 50}) {
      const auto x = randn(static_cast<size_t>(T * K), 60 + static_cast<uint32_t>(T), 1.0f);
      std::vector<float> ref(T * N), got(T * N);
      eg::cpu::packed_gemm_float_reference(t, p.data(), K, 0, N, x.data(), T, ref.data(), N);
      eg::cpu::packed_gemm_float(t, p.data(), K, 0, N, x.data(), T, got.data(), N);
      ASSERT_EQ(std::memcmp(ref.data(), got.data(), ref.size() * sizeof(float)), 0) << eg::dtype_name(t) << " T " << T;
      for (int threads : {1, 2}) {
        eg::cpu::set_num_threads(threads);
        eg::ops::matmul(x.data(), T, W, got.data());
        ASSERT_EQ(std::memcmp(ref.data(), got.data(), ref.size() * sizeof(float)), 0) << "matmul T " << T;
      }
      eg::cpu::set_num_threads(0);
      for (int64_t i = 0; i < T; ++i)
        for (int64_t n = 0; n < N; ++n) {
          double r = 0, mag = 0;
          for (int64_t k = 0; k < K; ++k) {
            r += w64[n * K + k] * x[i * K + k];
            mag += std::fabs(w64[n * K + k] * x[i * K + k]);
          }
          ASSERT_NEAR(got[i * N + n], r, 1e-6 * mag + 1e-12) << eg::dtype_name(t) << " t " << i << " n " << n;
        }
    }
    const auto x3 = randn(static_cast<size_t>(3 * K), 61, 1.0f);
    std::vector<float> y1(N), y3(3 * N);
    eg::ops::matmul(x3.data(), 1, W, y1.data());
    eg::ops::matmul(x3.data(), 3, W, y3.data());
    ASSERT_EQ(std::memcmp(y1.data(), y3.data(), N * sizeof(float)), 0) << "T = 1 vs T = 3, " << eg::dtype_name(t);
  }
}

// End to end: the packed model (LoadedModel::load packs) against the same file unpacked.
TEST(PackedKernels, ModelLogitsArePackedInvariant) {
  for (const char* name : {"tiny-gemma3-q4_0.gguf", "tiny-gemma3-q8_0.gguf"}) {
    const std::string path = egtest::shared_dir() + "/models/gguf/tiny-gemma3/" + name;
    auto packed = eg::LoadedModel::load(path);
    auto plain = eg::LoadedModel::load_files(path);
    const bool any_packed = packed->model().weights().layers[0].q.packed != nullptr;
    EXPECT_EQ(any_packed, eg::cpu::packed_available(packed->model().weights().layers[0].q.dtype)) << name;
    EXPECT_EQ(plain->model().weights().layers[0].q.packed, nullptr);
    const eg::ops::Weight& head = packed->model().weights().embed;  // Q6_K in the Q4_0 file
    if (head.dtype == DType::Q6_K) EXPECT_EQ(head.packed != nullptr, eg::cpu::packed_by_default(DType::Q6_K)) << name;
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
    ASSERT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0) << name;
  }
}

}  // namespace
