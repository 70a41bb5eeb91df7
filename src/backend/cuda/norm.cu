// RMSNorm and the int8 activation quantization (cuda_backend.h).
//
// quantize_act reproduces cpu::quantize_act_row bit for bit: d = amax/127 and id = 1/d are
// IEEE-rounded divisions (nvcc's default -prec-div=true), q = rint(x·id) (round half to even, as
// std::nearbyint in the default rounding mode), clamped to ±127.
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_util.h"

namespace eg::cuda {
namespace {

constexpr int kNormThreads = 256;

__global__ void quantize_act_kernel(const float* x, int64_t nblocks, int8_t* qs, int2* meta) {
  const int64_t b = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  detail::pdl_trigger();
  detail::pdl_wait();
  if (b >= nblocks) return;  // whole warps leave together (blockDim is a multiple of 32)
  detail::quantize_block_warp(x[b * 32 + lane], lane, b, qs, meta);
}

// One CTA per row. ss = Σ x² (per-thread strided partial sums, then warp shuffles, then the
// warps in order), inv = 1/sqrt(ss/n + eps), y = (x·inv)·(w_offset + w).
__global__ void __launch_bounds__(kNormThreads) rmsnorm_kernel(const float* x, int64_t n, const float* w,
                                                              float w_offset, float eps, float* y,
                                                              int8_t* act) {
  detail::pdl_trigger();
  detail::pdl_wait();
  const int64_t row = blockIdx.x;
  const float* xr = x + row * n;
  float* yr = y + row * n;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kNormThreads) ss = fmaf(xr[i], xr[i], ss);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xFFFFFFFFu, ss, o);
  __shared__ float part[kNormThreads / 32];
  __shared__ float inv_s;
  if (lane == 0) part[warp] = ss;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.0f;
    for (int k = 0; k < kNormThreads / 32; ++k) t += part[k];
    inv_s = 1.0f / sqrtf(t / static_cast<float>(n) + eps);
  }
  __syncthreads();
  const float inv = inv_s;
  int8_t* qs = nullptr;
  int2* meta = nullptr;
  if (act) {
    const size_t bytes = static_cast<size_t>(n) + static_cast<size_t>(n / 32) * 8;  // act_q8_bytes
    qs = act + row * bytes;
    meta = reinterpret_cast<int2*>(qs + n);
  }
  // n % 32 == 0 when act is set, so every warp iteration is one whole 32-block.
  for (int64_t i = threadIdx.x; i < n; i += kNormThreads) {
    float v = xr[i] * inv;
    if (w) v = v * (w_offset + w[i]);
    yr[i] = v;
    if (act) detail::quantize_block_warp(v, lane, i / 32, qs, meta);
  }
}

}  // namespace

void quantize_act(const Stream& s, const float* x_dev, int64_t K, void* act_dev) {
  if (K <= 0 || K % 32 != 0) {
    throw Error("CUDA quantize_act: K = " + std::to_string(K) + " is not a positive multiple of 32");
  }
  const int64_t nblocks = K / 32;
  auto* qs = static_cast<int8_t*>(act_dev);
  auto* meta = reinterpret_cast<int2*>(qs + K);
  constexpr int kWarpsPerCta = 8;
  const int64_t grid = (nblocks + kWarpsPerCta - 1) / kWarpsPerCta;
  detail::launch_kernel(quantize_act_kernel, dim3(static_cast<unsigned>(grid)), dim3(kWarpsPerCta * 32),
                        detail::stream_of(s.handle()), detail::pdl_enabled(), x_dev, nblocks, qs, meta);
}

void rmsnorm(const Stream& s, const float* x_dev, int64_t rows, int64_t n, const float* w_dev,
             float w_offset, float eps, float* y_dev, void* act_dev) {
  if (rows <= 0 || n <= 0) {
    throw Error("CUDA rmsnorm: bad shape " + std::to_string(rows) + "x" + std::to_string(n));
  }
  if (act_dev && n % 32 != 0) {
    throw Error("CUDA rmsnorm: a quantized output needs n % 32 == 0 (n = " + std::to_string(n) + ")");
  }
  detail::launch_kernel(rmsnorm_kernel, dim3(static_cast<unsigned>(rows)), dim3(kNormThreads),
                        detail::stream_of(s.handle()), detail::pdl_enabled(), x_dev, n, w_dev, w_offset, eps,
                        y_dev, static_cast<int8_t*>(act_dev));
}

}  // namespace eg::cuda
