// The prefill GEMM (prefill.h): weights dequantized from the tiled layout to row-major 16-bit,
// and cublasGemmEx on 16-bit inputs with f32 accumulation and output.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/prefill.h"

namespace eg::cuda {
namespace {

__device__ __forceinline__ uint16_t to16(float v, int t) {
  return t == static_cast<int>(GemmType::BF16) ? __bfloat16_as_ushort(__float2bfloat16_rn(v))
                                               : __half_as_ushort(__float2half_rn(v));
}

// One thread: 8 consecutive elements of one row (one 16-byte output).
__global__ void dequant_kernel(const uint8_t* data, const uint16_t* scales, int dt, int64_t rows, int64_t cols,
                               int out_t, uint16_t* out) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t per_row = cols / 8;
  if (g >= rows * per_row) return;
  const int64_t r = g / per_row, e0 = (g % per_row) * 8;
  const int64_t tile = r / kTileRows, rr = r % kTileRows;
  uint16_t o[8];
  if (dt == static_cast<int>(DType::Q4_0) || dt == static_cast<int>(DType::Q8_0)) {
    const int64_t nc = cols / 32, c = e0 / 32, j0 = e0 % 32;
    const size_t slot = static_cast<size_t>((tile * nc + c) * kTileRows + rr);
    const float d = __half2float(__ushort_as_half(scales[slot]));
    for (int i = 0; i < 8; ++i) {
      const int j = static_cast<int>(j0) + i;
      float v;
      if (dt == static_cast<int>(DType::Q4_0)) {
        const uint8_t b = data[slot * 16 + (j % 16)];
        const int q = j < 16 ? (b & 0x0F) : (b >> 4);
        v = static_cast<float>(q - 8) * d;
      } else {
        v = static_cast<float>(reinterpret_cast<const int8_t*>(data)[slot * 32 + j]) * d;
      }
      o[i] = to16(v, out_t);
    }
  } else {
    const int64_t nc = cols / 8, c = e0 / 8;
    const size_t slot = static_cast<size_t>((tile * nc + c) * kTileRows + rr);
    const uint16_t* src = reinterpret_cast<const uint16_t*>(data) + slot * 8;
    for (int i = 0; i < 8; ++i) {
      const uint16_t b = src[i];
      const float v = dt == static_cast<int>(DType::F16) ? __half2float(__ushort_as_half(b))
                                                         : __uint_as_float(static_cast<unsigned>(b) << 16);
      o[i] = (dt == static_cast<int>(DType::F16)) == (out_t == static_cast<int>(GemmType::F16)) ? b : to16(v, out_t);
    }
  }
  uint4 pk;
  pk.x = o[0] | (static_cast<unsigned>(o[1]) << 16);
  pk.y = o[2] | (static_cast<unsigned>(o[3]) << 16);
  pk.z = o[4] | (static_cast<unsigned>(o[5]) << 16);
  pk.w = o[6] | (static_cast<unsigned>(o[7]) << 16);
  *reinterpret_cast<uint4*>(out + r * cols + e0) = pk;
}

const char* cublas_name(cublasStatus_t st) {
  switch (st) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "internal error";
    default: return "error";
  }
}

void check_cublas(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) throw Error(std::string("cuBLAS: ") + what + " failed: " + cublas_name(st));
}

}  // namespace

size_t dequant_bytes(const DeviceWeight& W) { return static_cast<size_t>(W.rows) * static_cast<size_t>(W.cols) * 2; }

void dequant_weight(const Stream& s, const DeviceWeight& W, GemmType t, void* out_dev) {
  if (!matvec_supports(W.dtype)) throw Error(std::string("CUDA dequant_weight: type ") + dtype_name(W.dtype));
  if (W.cols % 8 != 0 || W.rows <= 0) throw Error("CUDA dequant_weight: bad shape");
  if (t != GemmType::BF16 && t != GemmType::F16) throw Error("CUDA dequant_weight: the output must be BF16 or F16");
  const int64_t n = W.rows * (W.cols / 8);
  const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
  dequant_kernel<<<blocks, 256, 0, detail::stream_of(s.handle())>>>(
      W.data.as<const uint8_t>(), W.scales.as<const uint16_t>(), static_cast<int>(W.dtype), W.rows, W.cols,
      static_cast<int>(t), static_cast<uint16_t*>(out_dev));
  EG_CUDA_CHECK_LAUNCH();
}

Gemm::Gemm(const Stream& s) {
  cublasHandle_t h = nullptr;
  check_cublas(cublasCreate(&h), "cublasCreate");
  handle_ = h;
  check_cublas(cublasSetStream(h, detail::stream_of(s.handle())), "cublasSetStream");
}

Gemm::~Gemm() {
  if (handle_) cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

void Gemm::run(GemmType t, const void* w_dev, int64_t N, int64_t K, const void* x_dev, int64_t T, float* y_dev,
               int64_t ldy) const {
  if (N <= 0 || K <= 0 || T <= 0 || ldy < N) throw Error("CUDA Gemm: bad shape");
  // Column-major view: Y^T [N, T] (ld ldy) = W [N, K] (row-major [N,K] = col-major K×N, so op T)
  // · X^T [K, T] (row-major [T, K] = col-major K×T, op N).
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t ty = t == GemmType::BF16 ? CUDA_R_16BF : t == GemmType::F16 ? CUDA_R_16F : CUDA_R_32F;
  check_cublas(cublasGemmEx(static_cast<cublasHandle_t>(handle_), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(N),
                            static_cast<int>(T), static_cast<int>(K), &alpha, w_dev, ty, static_cast<int>(K), x_dev,
                            ty, static_cast<int>(K), &beta, y_dev, CUDA_R_32F, static_cast<int>(ldy),
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP),
               "cublasGemmEx");
}

void zero_async(const Stream& s, void* ptr_dev, size_t n) {
  EG_CUDA_CHECK(cudaMemsetAsync(ptr_dev, 0, n, detail::stream_of(s.handle())));
}

}  // namespace eg::cuda
