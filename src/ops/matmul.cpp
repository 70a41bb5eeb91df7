// ops::matmul for every weight dtype (ops.h contract).
//   F32 / F16 / BF16: f32 dot products (backend/cpu/kernels.h), 4 tokens per weight-row read.
//   Block-quantized weights: the activation rows are quantized once per call (ActQ8 or Q8_K,
//   backend/cpu/quant_kernels.h), then integer block dots; OpenMP over chunks of output rows.
// Each output element is one dot product with a fixed arithmetic order, so it does not depend on
// T, on batching or on the thread count.
#include <omp.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/quant_kernels.h"
#include "core/error.h"
#include "ops/ops.h"

namespace eg::ops {
namespace {

void matmul_float(const float* x, int64_t T, const Weight& W, float* y) {
  const int64_t N = W.rows, K = W.cols;
  const size_t row_bytes = dtype_row_bytes(W.dtype, K);
  const auto* wbase = static_cast<const uint8_t*>(W.data);
  // Parallel over output rows; each element is one dot product in the canonical order. Tiny
  // products (router logits, toy models) stay on one thread: a parallel region costs more.
  const bool parallel = N * K * T >= (1 << 16);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t n = 0; n < N; ++n) {
    const void* wrow = wbase + static_cast<size_t>(n) * row_bytes;
    int64_t t = 0;
    for (; t + 4 <= T; t += 4) {
      const float* xs[4] = {x + t * K, x + (t + 1) * K, x + (t + 2) * K, x + (t + 3) * K};
      float out[4];
      cpu::dot4(xs, wrow, W.dtype, static_cast<size_t>(K), out);
      for (int j = 0; j < 4; ++j) y[(t + j) * N + n] = out[j];
    }
    for (; t < T; ++t) y[t * N + n] = cpu::dot(x + t * K, wrow, W.dtype, static_cast<size_t>(K));
  }
}

void matmul_quant(const float* x, int64_t T, const Weight& W, float* y) {
  const int64_t N = W.rows, K = W.cols;
  if (!cpu::qgemm_supports(W.dtype)) {
    throw Error(std::string("matmul: weight type ") + dtype_name(W.dtype) +
                " is not supported as a weight");
  }
  if (!row_fits_blocks(W.dtype, K)) {
    throw Error("matmul: " + std::string(dtype_name(W.dtype)) + " weight with " +
                std::to_string(K) + " columns (not a multiple of the block size " +
                std::to_string(dtype_block_elems(W.dtype)) + ")");
  }
  const size_t a_bytes = cpu::act_row_bytes(W.dtype, K);
  std::vector<uint8_t> acts(static_cast<size_t>(T) * a_bytes);
  const bool parallel = N * K * T >= (1 << 16);
#pragma omp parallel for schedule(static) if (parallel && T > 1)
  for (int64_t t = 0; t < T; ++t) {
    cpu::quantize_act_row(W.dtype, x + t * K, K, acts.data() + static_cast<size_t>(t) * a_bytes);
  }
  const size_t w_bytes = dtype_row_bytes(W.dtype, K);
  constexpr int64_t kRowChunk = 16;
  const int64_t chunks = (N + kRowChunk - 1) / kRowChunk;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t n0 = c * kRowChunk, n1 = std::min(N, n0 + kRowChunk);
    cpu::qgemm(W.dtype, W.data, w_bytes, n0, n1, acts.data(), a_bytes, T, K, y, N);
  }
}

}  // namespace

void matmul(const float* x, int64_t T, const Weight& W, float* y) {
  notify_matmul_observer(W, x, T);  // AWQ calibration hook (ops.h); no-op unless set
  if (is_quantized(W.dtype)) {
    matmul_quant(x, T, W, y);
  } else {
    matmul_float(x, T, W, y);
  }
}

}  // namespace eg::ops
