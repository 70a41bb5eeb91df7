// The Q6_K embedding / LM head of the CUDA backend (src/backend/cuda/q6k.h) on random non-zero
// weights (quant::quantize_row of normal values, so every sub-block scale and 6-bit code occurs),
// against host references. Label "cuda"; every test skips itself without a GPU.
//  - embed_row / embed_rows: bit-identical to quant::dequantize_row (the CPU's dequantization,
//    (d·sc)·q in f32) times the scale, rounded once.
//  - matvec: float64 Σ_k w_k·x_k of the dequantized row; |Δ| ≤ 1e-5·Σ_k |w_k·x_k| (f32 products
//    and a lane-strided f32 sum).
//  - lm_head_argmax: the logits as matvec then c·tanh(v/c) (|Δ| ≤ 1e-5·Σ|w·x| + 1e-6·c), and the
//    argmax id equal to the float64 reference's where its top two are further apart than that
//    bound; decode_argmax's value equals the device logit at that id.
#include <gtest/gtest.h>

#include "cuda_test_util.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/decode_kernels.h"
#include "backend/cuda/prefill.h"
#include "backend/cuda/q6k.h"
#include "core/dtype.h"
#include "core/error.h"
#include "quant/quant.h"

namespace eg {
namespace {

namespace gpu = eg::cuda;

struct Q6 {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> bytes;
  std::vector<float> deq;  // [rows, cols]
};

Q6 make(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.02f);
  Q6 q;
  q.rows = rows;
  q.cols = cols;
  const size_t rb = dtype_row_bytes(DType::Q6_K, cols);
  q.bytes.resize(static_cast<size_t>(rows) * rb);
  q.deq.resize(static_cast<size_t>(rows * cols));
  std::vector<float> x(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : x) v = d(rng) * (1.0f + static_cast<float>(r % 7));  // scales differ by row
    quant::quantize_row(DType::Q6_K, x.data(), cols, q.bytes.data() + r * rb);
    quant::dequantize_row(DType::Q6_K, q.bytes.data() + r * rb, cols, q.deq.data() + r * cols);
  }
  return q;
}

using cudatest::random_vec;

class CudaQ6K : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu::device_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(CudaQ6K, EmbedRowsAreBitIdenticalToTheCpuDequantization) {
  const Q6 q = make(37, 512, 1);
  const gpu::DeviceWeight W = gpu::upload_weight(q.bytes.data(), DType::Q6_K, q.rows, q.cols);
  ASSERT_EQ(W.dtype, DType::Q6_K);
  gpu::Stream s;
  const float scale = 22.627417f;
  gpu::DeviceBuffer args(sizeof(gpu::StepArgs)), x(q.cols * 4);
  for (int32_t tok : {0, 5, 36}) {
    const gpu::StepArgs a{tok, 0};
    args.upload(&a, sizeof a);
    gpu::embed_row(s, W, args.as<const gpu::StepArgs>(), scale, x.as<float>());
    s.sync();
    std::vector<float> got(q.cols);
    x.download(got.data(), q.cols * 4);
    for (int64_t e = 0; e < q.cols; ++e) ASSERT_EQ(got[e], q.deq[tok * q.cols + e] * scale) << "token " << tok << " e " << e;
  }
  const std::vector<int32_t> toks = {3, 36, 0, 3, 17};
  gpu::DeviceBuffer td(toks.size() * 4), xs(toks.size() * q.cols * 4);
  td.upload(toks.data(), toks.size() * 4);
  gpu::embed_rows(s, W, td.as<const int32_t>(), static_cast<int>(toks.size()), scale, xs.as<float>());
  s.sync();
  std::vector<float> got(toks.size() * q.cols);
  xs.download(got.data(), got.size() * 4);
  for (size_t t = 0; t < toks.size(); ++t)
    for (int64_t e = 0; e < q.cols; ++e)
      ASSERT_EQ(got[t * q.cols + e], q.deq[toks[t] * q.cols + e] * scale) << "row " << t << " e " << e;
}

TEST_F(CudaQ6K, MatvecAndLmHeadMatchFloat64) {
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{301, 256}, {1000, 1536}}) {
    const Q6 q = make(rows, cols, static_cast<uint32_t>(rows));
    const gpu::DeviceWeight W = gpu::upload_weight(q.bytes.data(), DType::Q6_K, rows, cols);
    const std::vector<float> x = random_vec(static_cast<size_t>(cols), 7);
    std::vector<double> ref(rows), mag(rows);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < cols; ++k) {
        const double p = static_cast<double>(q.deq[r * cols + k]) * x[k];
        ref[r] += p;
        mag[r] += std::fabs(p);
      }
    }
    gpu::Stream s;
    gpu::DeviceBuffer xd(cols * 4), y(rows * 4), res(8);
    xd.upload(x.data(), cols * 4);
    gpu::matvec(s, W, xd.as<const float>(), nullptr, y.as<float>());
    s.sync();
    std::vector<float> got(rows);
    y.download(got.data(), rows * 4);
    for (int64_t r = 0; r < rows; ++r) ASSERT_LE(std::fabs(got[r] - ref[r]), 1e-5 * mag[r]) << "row " << r;
    const float cap = 0.5f;  // small enough that the cap bends the logits
    gpu::lm_head_argmax(s, W, xd.as<const float>(), nullptr, cap, res.as<uint64_t>(), y.as<float>());
    s.sync();
    y.download(got.data(), rows * 4);
    uint64_t key = 0;
    res.download(&key, 8);
    const gpu::ArgmaxResult am = gpu::decode_argmax(key);
    std::vector<double> capped(rows);
    for (int64_t r = 0; r < rows; ++r) {
      capped[r] = cap * std::tanh(ref[r] / cap);
      ASSERT_LE(std::fabs(got[r] - capped[r]), 1e-5 * mag[r] + 1e-6 * cap) << "capped row " << r;
    }
    std::vector<int64_t> order(rows);
    for (int64_t r = 0; r < rows; ++r) order[r] = r;
    std::partial_sort(order.begin(), order.begin() + 2, order.end(), [&](int64_t a, int64_t b) { return capped[a] > capped[b]; });
    ASSERT_GE(am.id, 0);
    EXPECT_EQ(am.value, got[am.id]);
    if (capped[order[0]] - capped[order[1]] > 2e-5 * (mag[order[0]] + mag[order[1]]) + 2e-6 * cap) {
      EXPECT_EQ(am.id, order[0]);
    }
  }
}

TEST_F(CudaQ6K, BadShapesThrow) {
  std::vector<uint8_t> b(210 * 4, 0);
  EXPECT_THROW(gpu::upload_weight(b.data(), DType::Q6_K, 2, 128), Error);
  const gpu::DeviceWeight W = gpu::upload_weight(b.data(), DType::Q6_K, 4, 256);
  gpu::Stream s;
  EXPECT_THROW(gpu::matvec_q6k(s, W, nullptr, nullptr, 0.0f, nullptr), Error);
}

}  // namespace
}  // namespace eg
