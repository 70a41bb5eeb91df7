// Gemma 4 per-layer-embedding kernels (ple.h): the f32 matvec of per_layer_model_projection, the
// combine of the context and token parts, the PLE gate's GELU·up rows and an f32 → 16-bit row
// conversion, and the dequantization of the token rows the host uploads. The formulas and roundings
// are blocks::ple_inputs / ple_block's (model/ple.cpp) and quant::dequantize_row's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/ple.h"
#include "backend/cuda/q6k_device.cuh"

namespace eg::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kCombineThreads = 128;

__device__ __forceinline__ uint16_t to16(float v, int t) {
  return t == static_cast<int>(GemmType::BF16) ? __bfloat16_as_ushort(__float2bfloat16_rn(v))
                                               : __half_as_ushort(__float2half_rn(v));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

__device__ __forceinline__ float block_sum(float v, float* part) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float t = 0.0f;
  for (int k = 0; k < nw; ++k) t += part[k];
  __syncthreads();
  return t;
}

// Grid (ceil(N / 8), T), 8 warps: warp w of block b computes output row b·8 + w of token row t.
__global__ void __launch_bounds__(kWarpsPerBlock * 32) matvec_f32_kernel(const float* W, int64_t N, int64_t K,
                                                                        const float* x, float* y, int64_t ldy) {
  detail::pdl_trigger();
  detail::pdl_wait();
  const int lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (n >= N) return;
  const float* wr = W + n * K;
  const float* xr = x + static_cast<int64_t>(blockIdx.y) * K;
  float acc = 0.0f;
  if (K % 4 == 0) {
    const float4* w4 = reinterpret_cast<const float4*>(wr);
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    for (int64_t k = lane; k < K / 4; k += 32) {
      const float4 a = w4[k], b = x4[k];
      acc = fmaf(a.x, b.x, acc);
      acc = fmaf(a.y, b.y, acc);
      acc = fmaf(a.z, b.z, acc);
      acc = fmaf(a.w, b.w, acc);
    }
  } else {
    for (int64_t k = lane; k < K; k += 32) acc = fmaf(wr[k], xr[k], acc);
  }
  acc = warp_sum(acc);
  if (lane == 0) y[static_cast<int64_t>(blockIdx.y) * ldy + n] = acc;
}

// Grid (L, T): the slice of layer blockIdx.x of row blockIdx.y.
__global__ void __launch_bounds__(kCombineThreads) ple_combine_kernel(int L, int64_t P, float* c, const float* tok,
                                                                     const float* w, float proj_scale, float eps,
                                                                     float mix) {
  detail::pdl_trigger();
  detail::pdl_wait();
  __shared__ float part[kCombineThreads / 32];
  const int64_t base = (static_cast<int64_t>(blockIdx.y) * L + blockIdx.x) * P;
  float* cr = c + base;
  const float* tr = tok + base;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < P; i += kCombineThreads) {
    const float v = cr[i] * proj_scale;
    cr[i] = v;
    ss = fmaf(v, v, ss);
  }
  const float inv = 1.0f / sqrtf(block_sum(ss, part) / static_cast<float>(P) + eps);
  for (int64_t i = threadIdx.x; i < P; i += kCombineThreads) cr[i] = ((cr[i] * inv) * (0.0f + w[i]) + tr[i]) * mix;
}

// Grid (ceil(n/256), T).
__global__ void gelu_rows_by_kernel(const float* gate, int64_t gate_ld, const float* up, int64_t up_ld, int64_t n,
                                    int t, uint16_t* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t row = blockIdx.y;
  const float k0 = 0.7978845608028654f, k1 = 0.044715f;
  const float z = gate[row * gate_ld + i];
  const float inner = __fmul_rn(k0, __fadd_rn(z, __fmul_rn(__fmul_rn(__fmul_rn(k1, z), z), z)));
  const float g = __fmul_rn(__fmul_rn(0.5f, z), __fadd_rn(1.0f, tanhf(inner)));
  out[row * n + i] = to16(__fmul_rn(g, up[row * up_ld + i]), t);
}

// Grid (ceil(n/256), T).
__global__ void convert_rows_kernel(const float* x, int64_t n, int t, uint16_t* h) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t k = static_cast<int64_t>(blockIdx.y) * n + i;
  h[k] = to16(x[k], t);
}

// Grid (ceil(n/256), T): value e of row t (row_bytes apart), as quant::dequantize_row / to_f32.
__global__ void dequant_rows_kernel(const uint8_t* rows, size_t row_bytes, int dt, int64_t n, float scale, float* out) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n) return;
  const uint8_t* r = rows + static_cast<size_t>(blockIdx.y) * row_bytes;
  float v;
  if (dt == static_cast<int>(DType::Q6_K)) {
    v = q6k_value(r + static_cast<size_t>(e / 256) * kQ6KBlockBytes, static_cast<int>(e % 256));
  } else if (dt == static_cast<int>(DType::Q8_0) || dt == static_cast<int>(DType::Q4_0)) {
    const bool q8 = dt == static_cast<int>(DType::Q8_0);
    const uint8_t* b = r + static_cast<size_t>(e / 32) * (q8 ? 34 : 18);  // {f16 d, codes}
    const float d = __half2float(__ushort_as_half(static_cast<uint16_t>(b[0] | (b[1] << 8))));
    const int j = static_cast<int>(e % 32);
    if (q8) {
      v = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
    } else {
      const uint8_t c = b[2 + (j & 15)];
      v = static_cast<float>((j < 16 ? (c & 0xF) : (c >> 4)) - 8) * d;
    }
  } else if (dt == static_cast<int>(DType::F32)) {
    v = reinterpret_cast<const float*>(r)[e];
  } else {
    const uint16_t h = static_cast<uint16_t>(r[2 * e] | (r[2 * e + 1] << 8));
    v = dt == static_cast<int>(DType::F16) ? __half2float(__ushort_as_half(h)) : __uint_as_float(static_cast<unsigned>(h) << 16);
  }
  out[static_cast<int64_t>(blockIdx.y) * n + e] = __fmul_rn(v, scale);
}

cudaStream_t st(const Stream& s) { return detail::stream_of(s.handle()); }

void check(bool ok, const char* what) {
  if (!ok) throw Error(std::string("CUDA ") + what + ": bad shape");
}

void check16(GemmType t, const char* what) {
  if (t != GemmType::BF16 && t != GemmType::F16) throw Error(std::string("CUDA ") + what + ": the output must be BF16 or F16");
}

}  // namespace

void matvec_f32(const Stream& s, const float* W_dev, int64_t N, int64_t K, const float* x_dev, int T, float* y_dev,
                int64_t ldy) {
  check(N > 0 && K > 0 && T > 0 && T <= 65535 && ldy >= N && W_dev && x_dev && y_dev, "matvec_f32");
  detail::launch_kernel(matvec_f32_kernel,
                        dim3(static_cast<unsigned>((N + kWarpsPerBlock - 1) / kWarpsPerBlock), static_cast<unsigned>(T)),
                        dim3(kWarpsPerBlock * 32), st(s), detail::pdl_enabled(), W_dev, N, K, x_dev, y_dev, ldy);
}

void ple_combine(const Stream& s, int T, int L, int64_t P, float* c_dev, const float* tok_dev, const float* w_norm_dev,
                 float proj_scale, float eps, float mix) {
  check(T > 0 && T <= 65535 && L > 0 && P > 0 && c_dev && tok_dev && w_norm_dev, "ple_combine");
  detail::launch_kernel(ple_combine_kernel, dim3(static_cast<unsigned>(L), static_cast<unsigned>(T)),
                        dim3(kCombineThreads), st(s), detail::pdl_enabled(), L, P, c_dev, tok_dev, w_norm_dev,
                        proj_scale, eps, mix);
}

void gelu_mul_rows_by(const Stream& s, int T, int64_t n, const float* gate_dev, int64_t gate_ld, const float* up_dev,
                      int64_t up_ld, GemmType t, void* out_dev) {
  check(T > 0 && T <= 65535 && n > 0 && gate_ld >= n && up_ld >= n, "gelu_mul_rows_by");
  check16(t, "gelu_mul_rows_by");
  gelu_rows_by_kernel<<<dim3(static_cast<unsigned>((n + 255) / 256), static_cast<unsigned>(T)), 256, 0, st(s)>>>(
      gate_dev, gate_ld, up_dev, up_ld, n, static_cast<int>(t), static_cast<uint16_t*>(out_dev));
  EG_CUDA_CHECK_LAUNCH();
}

bool dequant_rows_supports(DType t, int64_t n) {
  switch (t) {
    case DType::Q4_0: case DType::Q8_0: return n > 0 && n % 32 == 0;
    case DType::Q6_K: return n > 0 && n % 256 == 0;
    case DType::F16: case DType::BF16: case DType::F32: return n > 0;
    default: return false;
  }
}

void dequant_rows(const Stream& s, DType t, const void* rows_dev, int T, int64_t n, float scale, float* out_dev) {
  if (!dequant_rows_supports(t, n))
    throw Error(std::string("CUDA dequant_rows: ") + dtype_name(t) + " rows of " + std::to_string(n) + " values");
  check(T > 0 && T <= 65535 && rows_dev && out_dev, "dequant_rows");
  dequant_rows_kernel<<<dim3(static_cast<unsigned>((n + 255) / 256), static_cast<unsigned>(T)), 256, 0, st(s)>>>(
      static_cast<const uint8_t*>(rows_dev), dtype_row_bytes(t, n), static_cast<int>(t), n, scale, out_dev);
  EG_CUDA_CHECK_LAUNCH();
}

void convert_rows(const Stream& s, int T, int64_t n, const float* x_dev, GemmType t, void* h_dev) {
  check(T > 0 && T <= 65535 && n > 0, "convert_rows");
  check16(t, "convert_rows");
  convert_rows_kernel<<<dim3(static_cast<unsigned>((n + 255) / 256), static_cast<unsigned>(T)), 256, 0, st(s)>>>(
      x_dev, n, static_cast<int>(t), static_cast<uint16_t*>(h_dev));
  EG_CUDA_CHECK_LAUNCH();
}

}  // namespace eg::cuda
