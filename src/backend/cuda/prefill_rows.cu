// The row kernels of the chunk prefill (prefill.h): embedding rows, RMSNorm and the residual
// joint per row (16-bit output for the next GEMM), GELU-tanh·up per row, and q/k norms + RoPE +
// K/V write per (token, head). The formulas and roundings are the decode kernels'
// (decode_kernels.cu, norm.cu), so a row computes what the decode step computes for its token.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/prefill.h"
#include "backend/cuda/q6k_device.cuh"

namespace eg::cuda {
namespace {

constexpr int kRowThreads = 256;    // norm_rows: rmsnorm_kernel's CTA (norm.cu)
constexpr int kJointThreads = 512;  // residual_norm_rows: residual_norm_kernel's CTA
constexpr int kHeadThreads = 128;
constexpr int kMaxHeadDim = 512;

__device__ __forceinline__ uint16_t to16(float v, int t) {
  return t == static_cast<int>(GemmType::BF16) ? __bfloat16_as_ushort(__float2bfloat16_rn(v))
                                               : __half_as_ushort(__float2half_rn(v));
}

__device__ __forceinline__ float block_sum(float v, float* part) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float t = 0.0f;
  for (int k = 0; k < nw; ++k) t += part[k];
  __syncthreads();
  return t;
}

// The host KVCache's conversions: round to nearest even; bf16 NaN stays NaN.
__device__ __forceinline__ void kv_store(void* base, int64_t i, float v, KVElem t) {
  switch (t) {
    case KVElem::F16: static_cast<uint16_t*>(base)[i] = __half_as_ushort(__float2half_rn(v)); break;
    case KVElem::BF16: {
      const unsigned u = __float_as_uint(v);
      uint16_t b;
      if ((u & 0x7fffffffu) > 0x7f800000u) b = static_cast<uint16_t>((u >> 16) | 0x40);
      else b = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
      static_cast<uint16_t*>(base)[i] = b;
      break;
    }
    default: static_cast<float*>(base)[i] = v; break;
  }
}

// Grid (ceil(cols/256), T): element e of row t.
__global__ void embed_rows_kernel(const uint8_t* data, const uint16_t* scales, int dt, int64_t cols,
                                  const int32_t* tokens, float scale, float* x) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= cols) return;
  const int64_t row = blockIdx.y;
  const int64_t r = tokens[row];
  if (dt == static_cast<int>(DType::Q6_K)) {  // GGUF blocks, not tiled (q6k.h)
    x[row * cols + e] = q6k_value(data + (static_cast<size_t>(r) * (cols / 256) + e / 256) * kQ6KBlockBytes, static_cast<int>(e % 256)) * scale;
    return;
  }
  const int64_t t = r / kTileRows, rr = r % kTileRows;
  float v;
  if (dt == static_cast<int>(DType::Q4_0) || dt == static_cast<int>(DType::Q8_0)) {
    const int64_t nc = cols / 32, c = e / 32, j = e % 32;
    const size_t slot = static_cast<size_t>((t * nc + c) * kTileRows + rr);
    const float d = __half2float(__ushort_as_half(scales[slot]));
    if (dt == static_cast<int>(DType::Q4_0)) {
      const uint8_t b = data[slot * 16 + (j % 16)];
      const int q = j < 16 ? (b & 0x0F) : (b >> 4);
      v = static_cast<float>(q - 8) * d;
    } else {
      v = static_cast<float>(reinterpret_cast<const int8_t*>(data)[slot * 32 + j]) * d;
    }
  } else {
    const int64_t nc = cols / 8, c = e / 8, j = e % 8;
    const size_t slot = static_cast<size_t>((t * nc + c) * kTileRows + rr);
    const uint16_t b = reinterpret_cast<const uint16_t*>(data)[slot * 8 + j];
    v = dt == static_cast<int>(DType::F16) ? __half2float(__ushort_as_half(b))
                                           : __uint_as_float(static_cast<unsigned>(b) << 16);
  }
  x[row * cols + e] = v * scale;
}

// One CTA per row (rmsnorm_kernel's formula and summation order).
__global__ void __launch_bounds__(kRowThreads) norm_rows_kernel(const float* x, int64_t n, const float* w, float off,
                                                               float eps, int t, uint16_t* h) {
  __shared__ float part[kRowThreads / 32];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  uint16_t* hr = h + static_cast<int64_t>(blockIdx.x) * n;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kRowThreads) ss = fmaf(xr[i], xr[i], ss);
  const float inv = 1.0f / sqrtf(block_sum(ss, part) / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += kRowThreads) hr[i] = to16((xr[i] * inv) * (off + w[i]), t);
}

// One CTA per row: residual_norm_kernel's formulas and summation order.
__global__ void __launch_bounds__(kJointThreads) residual_norm_rows_kernel(int64_t n, float* x, const float* proj,
                                                                        const float* w_post, const float* w_next,
                                                                        float off, float eps, int t, uint16_t* h,
                                                                        float scale) {
  __shared__ float part[kJointThreads / 32];
  const int64_t row = blockIdx.x;
  float* xr = x + row * n;
  const float* pr = proj + row * n;
  uint16_t* hr = h + row * n;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kJointThreads) ss = fmaf(pr[i], pr[i], ss);
  const float inv1 = 1.0f / sqrtf(block_sum(ss, part) / static_cast<float>(n) + eps);
  ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kJointThreads) {
    const float v = (xr[i] + (pr[i] * inv1) * (off + w_post[i])) * scale;
    xr[i] = v;
    ss = fmaf(v, v, ss);
  }
  const float inv2 = 1.0f / sqrtf(block_sum(ss, part) / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += kJointThreads)
    hr[i] = to16(w_next ? (xr[i] * inv2) * (off + w_next[i]) : xr[i], t);
}

// Grid (ceil(n/256), T).
__global__ void gelu_rows_kernel(const float* gu, int64_t n, int layout, int t, uint16_t* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float* r = gu + static_cast<int64_t>(blockIdx.y) * 2 * n;
  int64_t gi, ui;
  if (layout == static_cast<int>(GateUpLayout::Interleaved)) {
    gi = (i / 4) * 8 + (i % 4);
    ui = gi + 4;
  } else {
    gi = i;
    ui = n + i;
  }
  const float k0 = 0.7978845608028654f, k1 = 0.044715f;
  const float z = r[gi];
  const float inner = __fmul_rn(k0, __fadd_rn(z, __fmul_rn(__fmul_rn(__fmul_rn(k1, z), z), z)));
  const float g = __fmul_rn(__fmul_rn(0.5f, z), __fadd_rn(1.0f, tanhf(inner)));
  out[static_cast<int64_t>(blockIdx.y) * n + i] = to16(__fmul_rn(g, r[ui]), t);
}

// Grid (nh + nkv, T), kHeadThreads threads: decode_kernels.cu's head_norm_rope for one head of
// row t at position pos0 + t.
__global__ void __launch_bounds__(kHeadThreads) qk_rope_rows_kernel(QKVHeadArgs a, int pos0, const float* qkv,
                                                                   float* q_out, void* kc, void* vc) {
  __shared__ float tmp[kMaxHeadDim];
  __shared__ float part[kHeadThreads / 32];
  const int hd = a.head_dim, h = blockIdx.x, row = blockIdx.y;
  const int pos = pos0 + row;
  const int width = (a.n_heads + 2 * a.n_kv_heads) * hd;
  const float* qr = qkv + static_cast<int64_t>(row) * width;
  const bool is_q = h < a.n_heads;
  const int kvh = h - a.n_heads;
  const float* src = qr + static_cast<int64_t>(h) * hd;  // q heads, then k heads
  const float* nw = is_q ? a.q_norm_dev : a.k_norm_dev;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < hd; i += kHeadThreads) {
    const float v = src[i];
    tmp[i] = v;
    ss = fmaf(v, v, ss);
  }
  __syncthreads();
  if (nw) {
    const float t = block_sum(ss, part);
    const float inv = 1.0f / sqrtf(t / static_cast<float>(hd) + a.eps);
    for (int i = threadIdx.x; i < hd; i += kHeadThreads) tmp[i] = (tmp[i] * inv) * (a.w_offset + nw[i]);
    __syncthreads();
  }
  const int half = a.rope_dims / 2;
  float* dst_q = q_out + (static_cast<int64_t>(row) * a.n_heads + h) * hd;
  const int64_t kv_base = (static_cast<int64_t>(pos) * a.n_kv_heads + (is_q ? 0 : kvh)) * hd;
  for (int i = threadIdx.x; i < hd; i += kHeadThreads) {
    float v;
    if (i < 2 * half) {
      const int p = i < half ? i : i - half;
      const float ang = static_cast<float>(pos) * a.inv_freq_dev[p];
      const float c = cosf(ang), s = sinf(ang);
      const float x1 = tmp[p], x2 = tmp[p + half];
      v = i < half ? __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)) : __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
    } else {
      v = tmp[i];
    }
    if (is_q) dst_q[i] = v;
    else kv_store(kc, kv_base + i, v, a.kv);
  }
  if (!is_q) {
    const float* vsrc = qr + static_cast<int64_t>(a.n_heads + (a.v_from_k ? 0 : a.n_kv_heads) + kvh) * hd;
    float inv = 1.0f;
    if (a.v_norm) {  // Gemma 4: rmsnorm without a weight (qkv_heads_kernel's formula)
      float vs = 0.0f;
      for (int i = threadIdx.x; i < hd; i += kHeadThreads) vs = fmaf(vsrc[i], vsrc[i], vs);
      inv = 1.0f / sqrtf(block_sum(vs, part) / static_cast<float>(hd) + a.eps);
    }
    for (int i = threadIdx.x; i < hd; i += kHeadThreads) kv_store(vc, kv_base + i, a.v_norm ? vsrc[i] * inv : vsrc[i], a.kv);
  }
}

cudaStream_t st(const Stream& s) { return detail::stream_of(s.handle()); }

void check_rows(int T, int64_t n, const char* what) {
  if (T <= 0 || T > 65535 || n <= 0) throw Error(std::string("CUDA ") + what + ": bad shape");
}

void check16(GemmType t, const char* what) {
  if (t != GemmType::BF16 && t != GemmType::F16) throw Error(std::string("CUDA ") + what + ": the output must be BF16 or F16");
}

}  // namespace

void embed_rows(const Stream& s, const DeviceWeight& E, const int32_t* tokens_dev, int T, float scale, float* x_dev) {
  if (!matvec_supports(E.dtype) && E.dtype != DType::Q6_K) throw Error(std::string("CUDA embed_rows: type ") + dtype_name(E.dtype));
  check_rows(T, E.cols, "embed_rows");
  embed_rows_kernel<<<dim3(static_cast<unsigned>((E.cols + 255) / 256), static_cast<unsigned>(T)), 256, 0, st(s)>>>(
      E.data.as<const uint8_t>(), E.scales.as<const uint16_t>(), static_cast<int>(E.dtype), E.cols, tokens_dev, scale,
      x_dev);
  EG_CUDA_CHECK_LAUNCH();
}

void norm_rows(const Stream& s, int T, int64_t n, const float* x_dev, const float* w_dev, float w_offset, float eps,
               GemmType t, void* h_dev) {
  check_rows(T, n, "norm_rows");
  check16(t, "norm_rows");
  norm_rows_kernel<<<static_cast<unsigned>(T), kRowThreads, 0, st(s)>>>(x_dev, n, w_dev, w_offset, eps,
                                                                        static_cast<int>(t),
                                                                        static_cast<uint16_t*>(h_dev));
  EG_CUDA_CHECK_LAUNCH();
}

void residual_norm_rows(const Stream& s, int T, int64_t n, float* x_dev, const float* proj_dev,
                        const float* w_post_dev, const float* w_next_dev, float w_offset, float eps, GemmType t,
                        void* h_dev, float scale) {
  check_rows(T, n, "residual_norm_rows");
  check16(t, "residual_norm_rows");
  residual_norm_rows_kernel<<<static_cast<unsigned>(T), kJointThreads, 0, st(s)>>>(
      n, x_dev, proj_dev, w_post_dev, w_next_dev, w_offset, eps, static_cast<int>(t), static_cast<uint16_t*>(h_dev),
      scale);
  EG_CUDA_CHECK_LAUNCH();
}

void gelu_mul_rows(const Stream& s, int T, int64_t n, const float* gu_dev, GateUpLayout layout, GemmType t,
                   void* out_dev) {
  check_rows(T, n, "gelu_mul_rows");
  if (layout == GateUpLayout::Interleaved && n % 4 != 0) throw Error("CUDA gelu_mul_rows: interleaved n % 4 != 0");
  gelu_rows_kernel<<<dim3(static_cast<unsigned>((n + 255) / 256), static_cast<unsigned>(T)), 256, 0, st(s)>>>(
      gu_dev, n, static_cast<int>(layout), static_cast<int>(t), static_cast<uint16_t*>(out_dev));
  EG_CUDA_CHECK_LAUNCH();
}

void qk_rope_kv_rows(const Stream& s, const QKVHeadArgs& a, int T, int pos0, const float* qkv_dev, float* q_out_dev,
                     void* k_cache_dev, void* v_cache_dev) {
  if (a.head_dim <= 0 || a.head_dim > kMaxHeadDim || a.head_dim % 32 != 0 || a.n_heads <= 0 || a.n_kv_heads <= 0 ||
      a.rope_dims < 0 || a.rope_dims > a.head_dim || a.rope_dims % 2 || pos0 < 0)
    throw Error("CUDA qk_rope_kv_rows: bad shape");
  check_rows(T, a.head_dim, "qk_rope_kv_rows");
  const int heads = a.q_only ? a.n_heads : a.n_heads + a.n_kv_heads;
  qk_rope_rows_kernel<<<dim3(static_cast<unsigned>(heads), static_cast<unsigned>(T)), kHeadThreads,
                        0, st(s)>>>(a, pos0, qkv_dev, q_out_dev, k_cache_dev, v_cache_dev);
  EG_CUDA_CHECK_LAUNCH();
}

}  // namespace eg::cuda
