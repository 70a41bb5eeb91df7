// The CUDA kernels (src/backend/cuda) against the CPU implementation on random non-zero inputs.
// Label "cuda" (ctest -L cuda); every GPU test skips itself (GTEST_SKIP) when no device is there.
//
// Tolerances (docs/cuda.md):
//  - quantize_act: bit-identical to cpu::quantize_act_row.
//  - Q4_0 / Q8_0 matvec: the integer block sums are the CPU's exactly, only the f32 summation
//    order differs: |y_gpu − y_cpu| ≤ 2e-5 · S with S = Σ_k |w_k·x̂_k| (dequantized weight and
//    activation, float64) — a wrong nibble, block or scale gives errors ~ S/√K, ≥ 1e-2·S here.
//  - F16 / BF16 matvec: |y_gpu − y_ref| ≤ 2e-5 · Σ_k |w_k·x_k| against a float64 reference.
//  - rmsnorm: |y_gpu − y_cpu| ≤ 2e-6 · |y_cpu| + 1e-7 (the sum of squares in another order).
//  - lm_head_argmax: the chosen id's CPU logit is within the matvec tolerance of the CPU maximum,
//    exact ties go to the lowest id.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/quant_kernels.h"
#include "backend/cuda/cuda_backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "ops/ops.h"
#include "quant/quant.h"

namespace eg {
namespace {

namespace gpu = eg::cuda;

std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = d(rng);
    if (x == 0.0f) x = 1e-3f;  // non-zero inputs
  }
  return v;
}

// A weight [rows, cols] of type t made from random f32 values, in its file layout.
std::vector<uint8_t> make_weight(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const std::vector<float> f = random_vec(static_cast<size_t>(rows * cols), seed, 0.05f);
  const size_t rb = dtype_row_bytes(t, cols);
  std::vector<uint8_t> w(static_cast<size_t>(rows) * rb);
  for (int64_t n = 0; n < rows; ++n) {
    const float* src = f.data() + n * cols;
    uint8_t* dst = w.data() + static_cast<size_t>(n) * rb;
    if (t == DType::F16 || t == DType::BF16) {
      auto* h = reinterpret_cast<uint16_t*>(dst);
      for (int64_t k = 0; k < cols; ++k) h[k] = t == DType::F16 ? f32_to_f16(src[k]) : f32_to_bf16(src[k]);
    } else {
      quant::quantize_row(t, src, cols, dst);
    }
  }
  return w;
}

// Dequantized weight rows (f32), for the tolerance scale and the float64 reference.
std::vector<float> dequant(DType t, const std::vector<uint8_t>& w, int64_t rows, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  const size_t rb = dtype_row_bytes(t, cols);
  for (int64_t n = 0; n < rows; ++n) {
    quant::dequantize_row(t, w.data() + static_cast<size_t>(n) * rb, cols, out.data() + n * cols);
  }
  return out;
}

// The activation the quantized kernels see, dequantized: x̂[k] = d_b·q[k] (cpu::ActQ8 blocks).
std::vector<float> dequant_act(const std::vector<float>& x) {
  const int64_t K = static_cast<int64_t>(x.size());
  std::vector<cpu::ActQ8> a(static_cast<size_t>(K / 32));
  cpu::quantize_act_row(DType::Q8_0, x.data(), K, a.data());
  std::vector<float> xh(x.size());
  for (int64_t k = 0; k < K; ++k) xh[k] = a[k / 32].d * static_cast<float>(a[k / 32].qs[k % 32]);
  return xh;
}

// Per-row scale S_n = Σ_k |w[n,k]·x[k]| (float64).
std::vector<double> abs_dot(const std::vector<float>& wf, const std::vector<float>& x, int64_t rows) {
  const int64_t K = static_cast<int64_t>(x.size());
  std::vector<double> s(static_cast<size_t>(rows));
  for (int64_t n = 0; n < rows; ++n) {
    double acc = 0;
    for (int64_t k = 0; k < K; ++k) acc += std::fabs(static_cast<double>(wf[n * K + k]) * x[k]);
    s[n] = acc;
  }
  return s;
}

template <class T>
gpu::DeviceBuffer to_device(const std::vector<T>& v) {
  gpu::DeviceBuffer b(v.size() * sizeof(T));
  b.upload(v.data(), v.size() * sizeof(T));
  return b;
}

template <class T>
std::vector<T> to_host(const gpu::DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  b.download(v.data(), n * sizeof(T));
  return v;
}

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu::device_available()) GTEST_SKIP() << "no CUDA device";
    stream_ = std::make_unique<gpu::Stream>(0);
  }
  gpu::Stream& s() { return *stream_; }
  std::unique_ptr<gpu::Stream> stream_;
};

// ---- host-side layout (no GPU needed) -----------------------------------------------------

TEST(CudaLayout, TiledQ4_0MatchesTheDocumentedFormula) {
  const int64_t rows = 13, cols = 96;  // two tiles (the second padded), 3 blocks per row
  const std::vector<uint8_t> w = make_weight(DType::Q4_0, rows, cols, 1);
  const gpu::HostTiledWeight t = gpu::tile_weight(w.data(), DType::Q4_0, rows, cols);
  const int64_t nc = cols / 32, tiles = 2;
  ASSERT_EQ(t.data.size(), static_cast<size_t>(tiles * nc * 8 * 16));
  ASSERT_EQ(t.scales.size(), static_cast<size_t>(tiles * nc * 8 * 2));
  const auto* blocks = reinterpret_cast<const quant::BlockQ4_0*>(w.data());
  for (int64_t n = 0; n < tiles * 8; ++n) {
    for (int64_t c = 0; c < nc; ++c) {
      const size_t slot = static_cast<size_t>(((n / 8) * nc + c) * 8 + n % 8);
      uint16_t d;
      std::memcpy(&d, t.scales.data() + slot * 2, 2);
      if (n < rows) {
        const quant::BlockQ4_0& b = blocks[n * nc + c];
        EXPECT_EQ(0, std::memcmp(t.data.data() + slot * 16, b.qs, 16)) << n << "," << c;
        EXPECT_EQ(d, b.d);
      } else {  // padding rows are zero
        for (int i = 0; i < 16; ++i) EXPECT_EQ(t.data[slot * 16 + i], 0);
        EXPECT_EQ(d, 0);
      }
    }
  }
}

TEST(CudaLayout, TiledBF16KeepsEightElementChunks) {
  const int64_t rows = 8, cols = 24;
  const std::vector<uint8_t> w = make_weight(DType::BF16, rows, cols, 2);
  const gpu::HostTiledWeight t = gpu::tile_weight(w.data(), DType::BF16, rows, cols);
  EXPECT_TRUE(t.scales.empty());
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t c = 0; c < cols / 8; ++c) {
      const size_t slot = static_cast<size_t>(c * 8 + n);
      EXPECT_EQ(0, std::memcmp(t.data.data() + slot * 16, w.data() + (n * cols + c * 8) * 2, 16));
    }
  }
}

TEST(CudaLayout, BadWeightsAreClearErrors) {
  std::vector<uint8_t> w(4096);
  EXPECT_THROW(gpu::tile_weight(w.data(), DType::Q4_K, 1, 256), Error);   // unsupported type
  EXPECT_THROW(gpu::tile_weight(w.data(), DType::Q4_0, 4, 48), Error);    // not a block multiple
  EXPECT_THROW(gpu::tile_weight(w.data(), DType::BF16, 4, 12), Error);    // not a chunk multiple
  EXPECT_THROW(gpu::tile_weight(w.data(), DType::Q8_0, 0, 32), Error);    // empty
  EXPECT_FALSE(gpu::matvec_supports(DType::F32));
  EXPECT_TRUE(gpu::matvec_supports(DType::Q4_0));
}

// ---- kernels ------------------------------------------------------------------------------

TEST_F(CudaKernels, QuantizeActIsBitIdenticalToTheCpu) {
  for (int64_t K : {32, 1152, 6912}) {
    std::vector<float> x = random_vec(static_cast<size_t>(K), 10 + static_cast<uint32_t>(K));
    for (int i = 0; i < 32; ++i) x[i] = 0.0f;  // an all-zero block (d = 0)
    if (K > 64) x[40] = 1e-30f;               // a tiny value next to normal ones
    std::vector<cpu::ActQ8> ref(static_cast<size_t>(K / 32));
    cpu::quantize_act_row(DType::Q8_0, x.data(), K, ref.data());
    gpu::DeviceBuffer xd = to_device(x), act(gpu::act_q8_bytes(K));
    gpu::quantize_act(s(), xd.as<float>(), K, act.data());
    s().sync();
    const std::vector<uint8_t> h = to_host<uint8_t>(act, act.bytes());
    for (int64_t b = 0; b < K / 32; ++b) {
      ASSERT_EQ(0, std::memcmp(h.data() + b * 32, ref[b].qs, 32)) << "K " << K << " block " << b;
      float d;
      int32_t sum;
      std::memcpy(&d, h.data() + K + b * 8, 4);
      std::memcpy(&sum, h.data() + K + b * 8 + 4, 4);
      ASSERT_EQ(d, ref[b].d) << "K " << K << " block " << b;
      ASSERT_EQ(sum, ref[b].s) << "K " << K << " block " << b;
    }
  }
}

struct Shape {
  int64_t rows, cols;
};

// GPU matvec vs ops::matmul (CPU) for one dtype and shape; wk = 0: automatic.
void check_matvec(gpu::Stream& s, DType t, Shape sh, uint32_t seed, int wk = 0) {
  SCOPED_TRACE(std::string(dtype_name(t)) + " " + std::to_string(sh.rows) + "x" +
               std::to_string(sh.cols) + " wk " + std::to_string(wk));
  const std::vector<uint8_t> w = make_weight(t, sh.rows, sh.cols, seed);
  const std::vector<float> x = random_vec(static_cast<size_t>(sh.cols), seed + 1);
  std::vector<float> ref(static_cast<size_t>(sh.rows));
  ops::matmul(x.data(), 1, ops::Weight{w.data(), t, sh.rows, sh.cols}, ref.data());
  const bool quant = is_quantized(t);
  const std::vector<float> wf = dequant(t, w, sh.rows, sh.cols);
  const std::vector<float> xs = quant ? dequant_act(x) : x;
  const std::vector<double> S = abs_dot(wf, xs, sh.rows);
  // For the float weights also a float64 reference (ops::matmul itself rounds in f32).
  std::vector<double> exact(static_cast<size_t>(sh.rows));
  for (int64_t n = 0; n < sh.rows; ++n) {
    double acc = 0;
    for (int64_t k = 0; k < sh.cols; ++k) acc += static_cast<double>(wf[n * sh.cols + k]) * xs[k];
    exact[n] = acc;
  }

  const gpu::DeviceWeight W = gpu::upload_weight(w.data(), t, sh.rows, sh.cols);
  gpu::DeviceBuffer xd = to_device(x), act(gpu::act_q8_bytes(sh.cols)), yd(sh.rows * sizeof(float));
  if (quant) gpu::quantize_act(s, xd.as<float>(), sh.cols, act.data());
  gpu::MatvecConfig cfg;
  cfg.warps_per_tile = wk;
  gpu::matvec(s, W, quant ? nullptr : xd.as<float>(), quant ? act.data() : nullptr, yd.as<float>(), cfg);
  s.sync();
  const std::vector<float> y = to_host<float>(yd, static_cast<size_t>(sh.rows));
  int bad = 0;
  for (int64_t n = 0; n < sh.rows && bad < 5; ++n) {
    const double tol = 2e-5 * S[n] + 1e-30;
    if (std::fabs(y[n] - ref[n]) > 2 * tol || std::fabs(y[n] - exact[n]) > tol) {
      ADD_FAILURE() << "row " << n << ": gpu " << y[n] << " cpu " << ref[n] << " float64 "
                    << exact[n] << " tol " << tol;
      ++bad;
    }
  }
}

const Shape kGemma3_1bShapes[] = {
    {1024, 1152}, {256, 1152}, {1152, 1024}, {6912, 1152}, {1152, 6912}};

TEST_F(CudaKernels, MatvecQ4_0MatchesCpu) {
  uint32_t seed = 100;
  for (Shape sh : kGemma3_1bShapes) check_matvec(s(), DType::Q4_0, sh, seed++);
  check_matvec(s(), DType::Q4_0, {13, 64}, seed++);    // a padded tile, 2 blocks
  check_matvec(s(), DType::Q4_0, {1, 32}, seed++);     // one block
  check_matvec(s(), DType::Q4_0, {1001, 160}, seed++); // 5 blocks: lanes with nothing to do
}

TEST_F(CudaKernels, MatvecQ8_0MatchesCpu) {
  uint32_t seed = 200;
  for (Shape sh : kGemma3_1bShapes) check_matvec(s(), DType::Q8_0, sh, seed++);
  check_matvec(s(), DType::Q8_0, {13, 64}, seed++);
  check_matvec(s(), DType::Q8_0, {1001, 160}, seed++);
}

TEST_F(CudaKernels, MatvecBF16AndF16MatchFloat64) {
  uint32_t seed = 300;
  for (DType t : {DType::BF16, DType::F16}) {
    for (Shape sh : kGemma3_1bShapes) check_matvec(s(), t, sh, seed++);
    check_matvec(s(), t, {13, 24}, seed++);  // 3 chunks of 8
    check_matvec(s(), t, {7, 8}, seed++);
  }
}

TEST_F(CudaKernels, EveryWarpsPerTileGivesTheSameProduct) {
  for (int wk : {1, 2, 4, 8}) {
    check_matvec(s(), DType::Q4_0, {1152, 6912}, 400, wk);
    check_matvec(s(), DType::Q8_0, {100, 1152}, 401, wk);
    check_matvec(s(), DType::BF16, {100, 1152}, 402, wk);
  }
  gpu::MatvecConfig bad;
  bad.warps_per_tile = 3;
  const std::vector<uint8_t> w = make_weight(DType::BF16, 8, 8, 1);
  const gpu::DeviceWeight W = gpu::upload_weight(w.data(), DType::BF16, 8, 8);
  gpu::DeviceBuffer x(32), y(32);
  EXPECT_THROW(gpu::matvec(s(), W, x.as<float>(), nullptr, y.as<float>(), bad), Error);
  EXPECT_THROW(gpu::matvec(s(), W, nullptr, nullptr, y.as<float>()), Error);  // no input
}

TEST_F(CudaKernels, RmsnormMatchesCpuIncludingTheOneplusWOffset) {
  struct Case {
    int64_t rows, n;
    float offset;
    bool scale;
  };
  for (Case c : {Case{1, 1152, 1.0f, true}, Case{3, 1152, 0.0f, true}, Case{2, 100, 1.0f, true},
                 Case{1, 256, 0.0f, false}, Case{1, 6912, 1.0f, true}}) {
    SCOPED_TRACE(std::to_string(c.rows) + "x" + std::to_string(c.n) + " offset " + std::to_string(c.offset));
    const std::vector<float> x = random_vec(static_cast<size_t>(c.rows * c.n), 500 + static_cast<uint32_t>(c.n), 3.0f);
    const std::vector<float> w = random_vec(static_cast<size_t>(c.n), 600, 0.3f);
    std::vector<float> ref(x.size());
    ops::rmsnorm(x.data(), c.rows, c.n, c.scale ? w.data() : nullptr, DType::F32, c.offset, 1e-6f, ref.data());
    gpu::DeviceBuffer xd = to_device(x), wd = to_device(w), yd(x.size() * sizeof(float));
    gpu::rmsnorm(s(), xd.as<float>(), c.rows, c.n, c.scale ? wd.as<float>() : nullptr, c.offset, 1e-6f, yd.as<float>());
    // In place (y aliases x) gives the same.
    gpu::rmsnorm(s(), xd.as<float>(), c.rows, c.n, c.scale ? wd.as<float>() : nullptr, c.offset, 1e-6f, xd.as<float>());
    s().sync();
    const std::vector<float> y = to_host<float>(yd, x.size()), y2 = to_host<float>(xd, x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(y[i], ref[i], 2e-6 * std::fabs(ref[i]) + 1e-7) << i;
      ASSERT_EQ(y2[i], y[i]) << i;
    }
  }
}

TEST_F(CudaKernels, RmsnormQuantizedOutputEqualsQuantizeAct) {
  const int64_t n = 1152;
  const std::vector<float> x = random_vec(n, 700, 2.0f), w = random_vec(n, 701, 0.3f);
  gpu::DeviceBuffer xd = to_device(x), wd = to_device(w), yd(n * 4), act(gpu::act_q8_bytes(n));
  gpu::rmsnorm(s(), xd.as<float>(), 1, n, wd.as<float>(), 1.0f, 1e-6f, yd.as<float>(), act.data());
  s().sync();
  const std::vector<float> y = to_host<float>(yd, n);
  std::vector<cpu::ActQ8> ref(n / 32);
  cpu::quantize_act_row(DType::Q8_0, y.data(), n, ref.data());
  const std::vector<uint8_t> h = to_host<uint8_t>(act, act.bytes());
  for (int64_t b = 0; b < n / 32; ++b) {
    ASSERT_EQ(0, std::memcmp(h.data() + b * 32, ref[b].qs, 32)) << b;
    float d;
    std::memcpy(&d, h.data() + n + b * 8, 4);
    ASSERT_EQ(d, ref[b].d) << b;
  }
  EXPECT_THROW(gpu::rmsnorm(s(), xd.as<float>(), 1, 100, nullptr, 0.0f, 1e-6f, yd.as<float>(), act.data()), Error);
}

int32_t cpu_argmax(const std::vector<float>& v) {
  int32_t best = 0;
  for (size_t i = 1; i < v.size(); ++i) if (v[i] > v[best]) best = static_cast<int32_t>(i);
  return best;
}

void check_lm_head(gpu::Stream& s, DType t, Shape sh, float softcap, uint32_t seed) {
  SCOPED_TRACE(std::string(dtype_name(t)) + " " + std::to_string(sh.rows) + " softcap " + std::to_string(softcap));
  const std::vector<uint8_t> w = make_weight(t, sh.rows, sh.cols, seed);
  const std::vector<float> x = random_vec(static_cast<size_t>(sh.cols), seed + 1);
  std::vector<float> ref(static_cast<size_t>(sh.rows));
  ops::matmul(x.data(), 1, ops::Weight{w.data(), t, sh.rows, sh.cols}, ref.data());
  if (softcap > 0) ops::softcap(ref.data(), sh.rows, softcap);
  const bool quant = is_quantized(t);
  const std::vector<double> S =
      abs_dot(dequant(t, w, sh.rows, sh.cols), quant ? dequant_act(x) : x, sh.rows);

  const gpu::DeviceWeight W = gpu::upload_weight(w.data(), t, sh.rows, sh.cols);
  gpu::DeviceBuffer xd = to_device(x), act(gpu::act_q8_bytes(sh.cols)), res(8), logits(sh.rows * 4);
  if (quant) gpu::quantize_act(s, xd.as<float>(), sh.cols, act.data());
  gpu::lm_head_argmax(s, W, xd.as<float>(), act.data(), softcap, res.as<uint64_t>(), logits.as<float>());
  s.sync();
  uint64_t key;
  res.download(&key, 8);
  const gpu::ArgmaxResult r = gpu::decode_argmax(key);
  const int32_t want = cpu_argmax(ref);
  ASSERT_GE(r.id, 0);
  ASSERT_LT(r.id, sh.rows);
  const double tol = 2e-5 * S[want] + 2e-5 * S[r.id];
  EXPECT_GE(ref[r.id], ref[want] - tol) << "gpu id " << r.id << " cpu id " << want;
  const std::vector<float> lg = to_host<float>(logits, static_cast<size_t>(sh.rows));
  EXPECT_EQ(r.value, lg[r.id]);
  for (int64_t n = 0; n < sh.rows; n += 997) EXPECT_NEAR(lg[n], ref[n], 2e-5 * S[n] + 1e-30) << n;
  // Without the logits output the same id comes back.
  gpu::lm_head_argmax(s, W, xd.as<float>(), act.data(), softcap, res.as<uint64_t>());
  s.sync();
  uint64_t key2;
  res.download(&key2, 8);
  EXPECT_EQ(key2, key);
}

TEST_F(CudaKernels, LmHeadArgmaxMatchesCpu) {
  check_lm_head(s(), DType::Q4_0, {262144, 1152}, 0.0f, 800);  // gemma-3-1b
  check_lm_head(s(), DType::Q4_0, {131072, 1152}, 30.0f, 801); // with Gemma 2's soft-cap
  check_lm_head(s(), DType::Q8_0, {50001, 1152}, 0.0f, 802);
  check_lm_head(s(), DType::BF16, {3001, 640}, 5.0f, 803);
}

TEST_F(CudaKernels, LmHeadTiesGoToTheLowestId) {
  // Rows 9, 3 and 70001 are the same, and the largest: their logits are bit-identical (each
  // row's sum does not depend on its position), so the argmax must pick 3.
  const int64_t rows = 80000, cols = 64;
  std::vector<float> wf = random_vec(static_cast<size_t>(rows * cols), 900, 0.01f);
  const std::vector<float> x = random_vec(cols, 901);
  for (int64_t r : {9, 3, 70001}) {
    for (int64_t k = 0; k < cols; ++k) wf[r * cols + k] = x[k] > 0 ? 0.5f : -0.5f;
  }
  std::vector<uint16_t> w(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) w[i] = f32_to_bf16(wf[i]);
  const gpu::DeviceWeight W = gpu::upload_weight(w.data(), DType::BF16, rows, cols);
  gpu::DeviceBuffer xd = to_device(x), res(8);
  gpu::lm_head_argmax(s(), W, xd.as<float>(), nullptr, 0.0f, res.as<uint64_t>());
  s().sync();
  uint64_t key;
  res.download(&key, 8);
  EXPECT_EQ(gpu::decode_argmax(key).id, 3);
}

TEST_F(CudaKernels, CapturedGraphReplaysTheSameWork) {
  const int64_t K = 1152, N = 1024;
  const std::vector<uint8_t> w = make_weight(DType::Q4_0, N, K, 1000);
  const std::vector<float> x = random_vec(K, 1001), nw = random_vec(K, 1002, 0.2f);
  const gpu::DeviceWeight W = gpu::upload_weight(w.data(), DType::Q4_0, N, K);
  gpu::DeviceBuffer xd = to_device(x), nwd = to_device(nw), h(K * 4), act(gpu::act_q8_bytes(K)),
      y1(N * 4), y2(N * 4);
  gpu::rmsnorm(s(), xd.as<float>(), 1, K, nwd.as<float>(), 1.0f, 1e-6f, h.as<float>(), act.data());
  gpu::matvec(s(), W, nullptr, act.data(), y1.as<float>());
  s().sync();
  gpu::Graph g;
  g.begin_capture(s());
  gpu::rmsnorm(s(), xd.as<float>(), 1, K, nwd.as<float>(), 1.0f, 1e-6f, h.as<float>(), act.data());
  gpu::matvec(s(), W, nullptr, act.data(), y2.as<float>());
  g.end_capture();
  y2.zero();
  g.launch();
  g.launch();
  s().sync();
  EXPECT_EQ(to_host<float>(y1, N), to_host<float>(y2, N));
}

// A chain of dependent kernels (rmsnorm → matvec → quantize → matvec …) captured with
// programmatic dependent launch gives bit-identical results to plain launches: every kernel
// waits for its predecessor before it reads the activation.
TEST_F(CudaKernels, ProgrammaticLaunchChainEqualsPlainLaunches) {
  const int64_t K = 1152;
  const std::vector<uint8_t> w = make_weight(DType::Q4_0, K, K, 1100);
  const std::vector<uint8_t> wb = make_weight(DType::BF16, K, K, 1101);
  const std::vector<float> x = random_vec(K, 1102), nw = random_vec(K, 1103, 0.2f);
  const gpu::DeviceWeight W = gpu::upload_weight(w.data(), DType::Q4_0, K, K);
  const gpu::DeviceWeight WB = gpu::upload_weight(wb.data(), DType::BF16, K, K);
  gpu::DeviceBuffer xd = to_device(x), nwd = to_device(nw), h(K * 4), act(gpu::act_q8_bytes(K)),
      y(K * 4), z(K * 4);
  auto chain = [&]() {
    gpu::rmsnorm(s(), xd.as<float>(), 1, K, nwd.as<float>(), 1.0f, 1e-6f, h.as<float>(), act.data());
    for (int i = 0; i < 8; ++i) {
      gpu::matvec(s(), W, nullptr, act.data(), y.as<float>());
      gpu::matvec(s(), WB, y.as<float>(), nullptr, z.as<float>());
      gpu::rmsnorm(s(), z.as<float>(), 1, K, nullptr, 0.0f, 1e-6f, h.as<float>(), act.data());
    }
  };
  std::vector<float> want, got;
  for (bool pdl : {false, true}) {
    const bool on = gpu::set_programmatic_launch(pdl);
    if (pdl && !on) GTEST_SKIP() << "built without programmatic launch (CUDA < 12)";
    gpu::Graph g;
    g.begin_capture(s());
    chain();
    g.end_capture();
    h.zero();
    y.zero();
    g.launch();
    s().sync();
    (pdl ? got : want) = to_host<float>(h, K);
  }
  gpu::set_programmatic_launch(false);
  EXPECT_EQ(got, want);
  chain();  // and direct launches
  s().sync();
  EXPECT_EQ(to_host<float>(h, K), want);
}

}  // namespace
}  // namespace eg
