// Q6_K matvec / LM head (q6k.h): one warp per output row; per 256-value block, lane l takes the
// values l + 32·j (j < 8), so the warp's loads of ql / qh are contiguous.
#include <cuda_fp16.h>

#include <string>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/matvec_device.cuh"
#include "backend/cuda/q6k.h"
#include "backend/cuda/q6k_device.cuh"

namespace eg::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

__global__ void __launch_bounds__(kWarpsPerBlock * 32) q6k_matvec_kernel(const uint8_t* W, int64_t rows, int64_t cols,
                                                                        const float* x, float* y, float softcap,
                                                                        unsigned long long* result) {
  detail::pdl_trigger();
  detail::pdl_wait();
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int64_t nb = cols / 256;
  const uint8_t* wr = W + row * nb * kQ6KBlockBytes;
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = wr + b * kQ6KBlockBytes;
    const float* xb = x + b * 256;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int e = lane + 32 * j;
      acc = fmaf(q6k_value(blk, e), xb[e], acc);
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, o);
  if (lane != 0) return;
  float v = acc;
  if (result && softcap > 0.0f) v = softcap * tanhf(v / softcap);
  if (y) y[row] = v;
  if (result) atomicMax(result, argmax_key(v, row));
}

}  // namespace

DeviceWeight upload_q6k(const void* src, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0 || cols % 256 != 0)
    throw Error("CUDA: a Q6_K weight of " + std::to_string(rows) + "x" + std::to_string(cols) +
                " (columns must be a positive multiple of 256)");
  DeviceWeight w;
  w.dtype = DType::Q6_K;
  w.rows = rows;
  w.cols = cols;
  const size_t bytes = static_cast<size_t>(rows) * static_cast<size_t>(cols / 256) * kQ6KBlockBytes;
  w.data = DeviceBuffer(bytes);
  w.data.upload(src, bytes);
  return w;
}

void matvec_q6k(const Stream& s, const DeviceWeight& W, const float* x_dev, float* y_dev, float softcap,
                uint64_t* result_dev) {
  if (W.dtype != DType::Q6_K || W.cols % 256 != 0) throw Error("CUDA matvec_q6k: not a Q6_K weight");
  if (!x_dev || (!y_dev && !result_dev)) throw Error("CUDA matvec_q6k: missing input or output");
  const bool pdl = !result_dev && detail::pdl_enabled();
  detail::launch_kernel(q6k_matvec_kernel, dim3(static_cast<unsigned>((W.rows + kWarpsPerBlock - 1) / kWarpsPerBlock)),
                        dim3(kWarpsPerBlock * 32), detail::stream_of(s.handle()), pdl, W.data.as<const uint8_t>(),
                        W.rows, W.cols, x_dev, y_dev, softcap, reinterpret_cast<unsigned long long*>(result_dev));
}

}  // namespace eg::cuda
