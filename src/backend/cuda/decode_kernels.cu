// The per-layer decode kernels besides matvec/rmsnorm (decode_kernels.h): embedding row, q/k
// norms + RoPE + K/V write, split attention + combine, residual joint, GELU-tanh·mul.
//
// Every kernel calls pdl_trigger/pdl_wait before touching memory (cuda_util.h), so programmatic
// launch is safe. Reductions run in a fixed order (warp shuffles, then the warps in order), so a
// result depends only on the inputs and the launch shape, never on timing.
#include <cuda_fp16.h>

#include <cmath>
#include <string>

#include "backend/cuda/attention_device.cuh"
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/decode_kernels.h"
#include "backend/cuda/fused.h"
#include "backend/cuda/q6k_device.cuh"

namespace eg::cuda {
namespace {

// ---- embedding --------------------------------------------------------------------------------

__global__ void embed_kernel(const uint8_t* data, const uint16_t* scales, int dt, int64_t cols,
                             const StepArgs* args, float scale, float* x, unsigned long long* clear) {
  detail::pdl_trigger();
  detail::pdl_wait();
  if (clear && blockIdx.x == 0 && threadIdx.x == 0) *clear = 0ull;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= cols) return;
  const int64_t r = args->token;
  if (dt == static_cast<int>(DType::Q6_K)) {  // GGUF blocks, not tiled (q6k.h)
    x[e] = q6k_value(data + (static_cast<size_t>(r) * (cols / 256) + e / 256) * kQ6KBlockBytes, static_cast<int>(e % 256)) * scale;
    return;
  }
  const int64_t t = r / kTileRows, rr = r % kTileRows;
  float v;
  if (dt == static_cast<int>(DType::Q4_0) || dt == static_cast<int>(DType::Q8_0)) {
    const int64_t nc = cols / 32, c = e / 32, j = e % 32;
    const size_t slot = static_cast<size_t>((t * nc + c) * kTileRows + rr);
    const float d = f16_to_f32_dev(scales[slot]);
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
    v = dt == static_cast<int>(DType::F16) ? f16_to_f32_dev(b) : __uint_as_float(static_cast<unsigned>(b) << 16);
  }
  x[e] = v * scale;
}

__global__ void __launch_bounds__(kHeadThreads) qkv_heads_kernel(QKVHeadArgs a, const float* qkv, const StepArgs* args,
                                                                 float* q_out, void* kc, void* vc) {
  detail::pdl_trigger();
  detail::pdl_wait();
  __shared__ float sh[kMaxHeadDim];
  __shared__ float part[kHeadThreads / 32];
  const int hd = a.head_dim, h = blockIdx.x;
  const bool is_q = h < a.n_heads;
  const int kvh = h - a.n_heads;
  const float* src = is_q ? qkv + static_cast<int64_t>(h) * hd : qkv + static_cast<int64_t>(a.n_heads + kvh) * hd;
  const int pos = args->pos;
  float* dst_q = q_out + static_cast<int64_t>(h) * hd;
  const int64_t kv_base = (static_cast<int64_t>(pos) * a.n_kv_heads + (is_q ? 0 : kvh)) * hd;
  head_norm_rope(a, src, is_q ? a.q_norm_dev : a.k_norm_dev, pos, sh, part, [&](int i, float v) {
    if (is_q) dst_q[i] = v;
    else kv_store(kc, kv_base + i, v, a.kv);
  });
  if (!is_q) {
    const float* vsrc = qkv + static_cast<int64_t>(a.n_heads + (a.v_from_k ? 0 : a.n_kv_heads) + kvh) * hd;
    float inv = 1.0f;
    if (a.v_norm) {  // Gemma 4: rmsnorm without a weight
      float ss = 0.0f;
      for (int i = threadIdx.x; i < hd; i += kHeadThreads) ss = fmaf(vsrc[i], vsrc[i], ss);
      inv = 1.0f / sqrtf(block_sum(ss, part) / static_cast<float>(hd) + a.eps);
    }
    for (int i = threadIdx.x; i < hd; i += kHeadThreads) kv_store(vc, kv_base + i, a.v_norm ? vsrc[i] * inv : vsrc[i], a.kv);
  }
}

// ---- attention ----------------------------------------------------------------------------------

// CTA (split, head): online softmax over its keys, one warp per key at a time; then the warps
// merge in shared memory and write {m, l, o[hd]} for the split.
__global__ void __launch_bounds__(kAttnWarps * 32) attn_partial_kernel(AttentionArgs a, const float* q, const void* kc,
                                                                     const void* vc, const StepArgs* args,
                                                                     float* partial) {
  detail::pdl_trigger();
  detail::pdl_wait();
  constexpr int kMaxE = kMaxHeadDim / 32;
  __shared__ float sq[kMaxHeadDim];
  __shared__ float sacc[kAttnWarps][kMaxHeadDim];
  __shared__ float sm[kAttnWarps], sl[kAttnWarps];
  const int hd = a.head_dim, E = hd / 32;
  const int split = blockIdx.x, h = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int kvh = h / (a.n_heads / a.n_kv_heads);
  const int p = args->pos;
  const int first = a.window > 0 ? max(0, p - a.window + 1) : 0;
  const int n = p - first + 1;
  const int chunk = (n + a.n_splits - 1) / a.n_splits;
  const int j0 = first + split * chunk;
  const int j1 = min(p + 1, j0 + chunk);
  for (int i = threadIdx.x; i < hd; i += blockDim.x) sq[i] = q[static_cast<int64_t>(h) * hd + i];
  __syncthreads();
  float qr[kMaxE], acc[kMaxE];
#pragma unroll
  for (int e = 0; e < kMaxE; ++e) {
    qr[e] = e < E ? sq[e * 32 + lane] : 0.0f;
    acc[e] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int j = j0 + warp; j < j1; j += kAttnWarps) {
    const int64_t base = (static_cast<int64_t>(j) * a.n_kv_heads + kvh) * hd;
    float d = 0.0f;
#pragma unroll
    for (int e = 0; e < kMaxE; ++e)
      if (e < E) d = fmaf(qr[e], kv_load(kc, base + e * 32 + lane, a.kv), d);
    float sc = warp_sum(d) * a.scale;
    if (a.softcap > 0.0f) sc = a.softcap * tanhf(sc / a.softcap);
    const float mn = fmaxf(m, sc);
    const float corr = expf(m - mn), pj = expf(sc - mn);
    l = l * corr + pj;
#pragma unroll
    for (int e = 0; e < kMaxE; ++e)
      if (e < E) acc[e] = acc[e] * corr + pj * kv_load(vc, base + e * 32 + lane, a.kv);
    m = mn;
  }
#pragma unroll
  for (int e = 0; e < kMaxE; ++e)
    if (e < E) sacc[warp][e * 32 + lane] = acc[e];
  if (lane == 0) {
    sm[warp] = m;
    sl[warp] = l;
  }
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w) M = fmaxf(M, sm[w]);
  float* out = partial + (static_cast<int64_t>(h) * a.n_splits + split) * (hd + 2);
  float wgt[kAttnWarps];
  float L = 0.0f;
  for (int w = 0; w < kAttnWarps; ++w) {
    wgt[w] = M == -INFINITY ? 0.0f : expf(sm[w] - M);
    L += wgt[w] * sl[w];
  }
  if (threadIdx.x == 0) {
    out[0] = M;
    out[1] = L;
  }
  for (int i = threadIdx.x; i < hd; i += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) o += wgt[w] * sacc[w][i];
    out[2 + i] = o;
  }
}

// CTA h, thread d: merges the splits of head h, writes out and (act) its int8 blocks.
__global__ void attn_combine_kernel(AttentionArgs a, const float* partial, float* out, int8_t* act) {
  detail::pdl_trigger();
  detail::pdl_wait();
  const int hd = a.head_dim, h = blockIdx.x, d = threadIdx.x;
  const float* ph = partial + static_cast<int64_t>(h) * a.n_splits * (hd + 2);
  float M = -INFINITY;
  for (int s = 0; s < a.n_splits; ++s) M = fmaxf(M, ph[s * (hd + 2)]);
  float L = 0.0f, o = 0.0f;
  for (int s = 0; s < a.n_splits; ++s) {
    const float* ps = ph + s * (hd + 2);
    const float w = ps[0] == -INFINITY ? 0.0f : expf(ps[0] - M);
    L += w * ps[1];
    o += w * ps[2 + d];
  }
  const float v = o / L;
  const int64_t i = static_cast<int64_t>(h) * hd + d;
  out[i] = v;
  if (act) {
    const int64_t K = static_cast<int64_t>(a.n_heads) * hd;
    detail::quantize_block_warp(v, d & 31, i / 32, act, reinterpret_cast<int2*>(act + K));
  }
}

// CTA (split, head) of attention_fused (fused.h): attn_fused_item with 4 warps.
template <int kE, KVElem kT>
__global__ void __launch_bounds__(kAttnWarps * 32) attn_fused_kernel(QKVHeadArgs qa, AttentionArgs a, const float* qkv,
                                                                   const StepArgs* args, void* kc, void* vc,
                                                                   float* partial, unsigned* counters, float* outp) {
  detail::pdl_trigger();
  detail::pdl_wait();
  attn_fused_item<kE, kT, kAttnWarps, false>(qa, a, qkv, args->pos, kc, vc, partial, counters, outp, nullptr, nullptr,
                                             blockIdx.x, blockIdx.y);
}

// ---- residual joint -----------------------------------------------------------------------------

__global__ void __launch_bounds__(kJointThreads) residual_norm_kernel(int64_t n, float* x, const float* proj,
                                                                    const float* w_post, const float* w_next,
                                                                    float off, float eps, float* y, int8_t* act,
                                                                    float scale) {
  detail::pdl_trigger();
  detail::pdl_wait();
  __shared__ float part[kJointThreads / 32];
  const int lane = threadIdx.x & 31;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kJointThreads) ss = fmaf(proj[i], proj[i], ss);
  const float inv1 = 1.0f / sqrtf(block_sum(ss, part) / static_cast<float>(n) + eps);
  ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kJointThreads) {
    const float v = (x[i] + (proj[i] * inv1) * (off + w_post[i])) * scale;
    x[i] = v;
    ss = fmaf(v, v, ss);
  }
  const float inv2 = 1.0f / sqrtf(block_sum(ss, part) / static_cast<float>(n) + eps);
  int2* meta = act ? reinterpret_cast<int2*>(act + n) : nullptr;
  for (int64_t i = threadIdx.x; i < n; i += kJointThreads) {
    const float v = w_next ? (x[i] * inv2) * (off + w_next[i]) : x[i];
    y[i] = v;
    if (act) detail::quantize_block_warp(v, lane, i / 32, act, meta);
  }
}

// ---- GELU-tanh · mul ------------------------------------------------------------------------------

__global__ void gelu_mul_kernel(const float* gu, const float* up, int64_t n, float* out, int8_t* act) {
  detail::pdl_trigger();
  detail::pdl_wait();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;  // n % 32 == 0 with act: whole warps leave together
  const float k0 = 0.7978845608028654f, k1 = 0.044715f;
  const float z = gu[i];
  const float inner = __fmul_rn(k0, __fadd_rn(z, __fmul_rn(__fmul_rn(__fmul_rn(k1, z), z), z)));
  const float g = __fmul_rn(__fmul_rn(0.5f, z), __fadd_rn(1.0f, tanhf(inner)));
  const float v = __fmul_rn(g, up[i]);
  if (out) out[i] = v;
  if (act) detail::quantize_block_warp(v, threadIdx.x & 31, i / 32, act, reinterpret_cast<int2*>(act + n));
}

cudaStream_t st(const Stream& s) { return detail::stream_of(s.handle()); }

void check_head_dim(int hd, const char* what) {
  if (hd <= 0 || hd > kMaxHeadDim || hd % 32 != 0)
    throw Error(std::string("CUDA ") + what + ": head_dim " + std::to_string(hd) + " is not a multiple of 32 in 32.." +
                std::to_string(kMaxHeadDim));
}

}  // namespace

void embed_row(const Stream& s, const DeviceWeight& E, const StepArgs* args_dev, float scale, float* x_dev,
               uint64_t* clear_dev) {
  if (!matvec_supports(E.dtype) && E.dtype != DType::Q6_K) throw Error(std::string("CUDA embed_row: type ") + dtype_name(E.dtype));
  const int64_t H = E.cols;
  detail::launch_kernel(embed_kernel, dim3(static_cast<unsigned>((H + 255) / 256)), dim3(256), st(s),
                        detail::pdl_enabled(), E.data.as<const uint8_t>(), E.scales.as<const uint16_t>(),
                        static_cast<int>(E.dtype), H, args_dev, scale, x_dev,
                        reinterpret_cast<unsigned long long*>(clear_dev));
}

void qkv_heads(const Stream& s, const QKVHeadArgs& a, const float* qkv_dev, const StepArgs* args_dev,
               float* q_out_dev, void* k_cache_dev, void* v_cache_dev) {
  check_head_dim(a.head_dim, "qkv_heads");
  if (a.n_heads <= 0 || a.n_kv_heads <= 0 || a.rope_dims < 0 || a.rope_dims > a.head_dim || a.rope_dims % 2)
    throw Error("CUDA qkv_heads: bad shape");
  const int heads = a.q_only ? a.n_heads : a.n_heads + a.n_kv_heads;
  detail::launch_kernel(qkv_heads_kernel, dim3(static_cast<unsigned>(heads)), dim3(kHeadThreads),
                        st(s), detail::pdl_enabled(), a, qkv_dev, args_dev, q_out_dev, k_cache_dev, v_cache_dev);
}

int64_t attention_partial_floats(int n_heads, int head_dim, int n_splits) {
  return static_cast<int64_t>(n_heads) * n_splits * (head_dim + 2);
}

void attention_decode(const Stream& s, const AttentionArgs& a, const float* q_dev, const void* k_cache_dev,
                      const void* v_cache_dev, const StepArgs* args_dev, float* partial_dev, float* out_dev,
                      void* act_dev) {
  check_head_dim(a.head_dim, "attention_decode");
  if (a.n_heads <= 0 || a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0 || a.n_splits < 1 || a.n_splits > 65535)
    throw Error("CUDA attention_decode: bad shape");
  detail::launch_kernel(attn_partial_kernel, dim3(static_cast<unsigned>(a.n_splits), static_cast<unsigned>(a.n_heads)),
                        dim3(kAttnWarps * 32), st(s), detail::pdl_enabled(), a, q_dev, k_cache_dev, v_cache_dev,
                        args_dev, partial_dev);
  detail::launch_kernel(attn_combine_kernel, dim3(static_cast<unsigned>(a.n_heads)),
                        dim3(static_cast<unsigned>(a.head_dim)), st(s), detail::pdl_enabled(), a,
                        static_cast<const float*>(partial_dev), out_dev, static_cast<int8_t*>(act_dev));
}

void attention_fused(const Stream& s, const QKVHeadArgs& qa, const AttentionArgs& aa, const float* qkv_dev,
                     const StepArgs* args_dev, void* k_cache_dev, void* v_cache_dev, float* partial_dev,
                     uint32_t* counters_dev, float* out_dev) {
  check_head_dim(aa.head_dim, "attention_fused");
  if (aa.n_heads <= 0 || aa.n_kv_heads <= 0 || aa.n_heads % aa.n_kv_heads != 0 || aa.n_splits < 1 ||
      aa.n_splits > 65535 || qa.n_heads != aa.n_heads || qa.n_kv_heads != aa.n_kv_heads ||
      qa.head_dim != aa.head_dim || qa.rope_dims < 0 || qa.rope_dims > qa.head_dim || qa.rope_dims % 2)
    throw Error("CUDA attention_fused: bad shape");
  if (aa.n_splits > kFusedMaxSplits) throw Error("CUDA attention_fused: more than 1024 splits");
  if (!counters_dev || !partial_dev || !out_dev) throw Error("CUDA attention_fused: missing buffer");
  const int E = aa.head_dim / 32;
  using K = void (*)(QKVHeadArgs, AttentionArgs, const float*, const StepArgs*, void*, void*, float*, unsigned*, float*);
  static const K table[3][3] = {
      {attn_fused_kernel<4, KVElem::F16>, attn_fused_kernel<4, KVElem::BF16>, attn_fused_kernel<4, KVElem::F32>},
      {attn_fused_kernel<8, KVElem::F16>, attn_fused_kernel<8, KVElem::BF16>, attn_fused_kernel<8, KVElem::F32>},
      {attn_fused_kernel<16, KVElem::F16>, attn_fused_kernel<16, KVElem::BF16>, attn_fused_kernel<16, KVElem::F32>}};
  const K k = table[E <= 4 ? 0 : E <= 8 ? 1 : 2][static_cast<int>(aa.kv)];
  detail::launch_kernel(k, dim3(static_cast<unsigned>(aa.n_splits), static_cast<unsigned>(aa.n_heads)),
                        dim3(kAttnWarps * 32), st(s), detail::pdl_enabled(), qa, aa, qkv_dev, args_dev, k_cache_dev,
                        v_cache_dev, partial_dev, reinterpret_cast<unsigned*>(counters_dev), out_dev);
}

void residual_norm(const Stream& s, int64_t n, float* x_dev, const float* proj_dev, const float* w_post_dev,
                   const float* w_next_dev, float w_offset, float eps, float* y_dev, void* act_dev, float scale) {
  if (n <= 0 || (act_dev && n % 32 != 0)) throw Error("CUDA residual_norm: bad n = " + std::to_string(n));
  detail::launch_kernel(residual_norm_kernel, dim3(1), dim3(kJointThreads), st(s), detail::pdl_enabled(), n, x_dev,
                        proj_dev, w_post_dev, w_next_dev, w_offset, eps, y_dev, static_cast<int8_t*>(act_dev), scale);
}

void gelu_mul_by(const Stream& s, const float* gate_dev, const float* up_dev, int64_t n, float* out_dev, void* act_dev) {
  if (n <= 0 || (act_dev && n % 32 != 0)) throw Error("CUDA gelu_mul_by: bad n = " + std::to_string(n));
  detail::launch_kernel(gelu_mul_kernel, dim3(static_cast<unsigned>((n + 255) / 256)), dim3(256), st(s),
                        detail::pdl_enabled(), gate_dev, up_dev, n, out_dev, static_cast<int8_t*>(act_dev));
}

void gelu_mul(const Stream& s, const float* gu_dev, int64_t n, float* out_dev, void* act_dev) {
  gelu_mul_by(s, gu_dev, gu_dev + n, n, out_dev, act_dev);
}

}  // namespace eg::cuda

namespace eg::cuda {

void copy_to_device_async(const Stream& s, void* dst_dev, const void* src, size_t n) {
  EG_CUDA_CHECK(cudaMemcpyAsync(dst_dev, src, n, cudaMemcpyHostToDevice, detail::stream_of(s.handle())));
}

void copy_to_host_async(const Stream& s, void* dst, const void* src_dev, size_t n) {
  EG_CUDA_CHECK(cudaMemcpyAsync(dst, src_dev, n, cudaMemcpyDeviceToHost, detail::stream_of(s.handle())));
}

}  // namespace eg::cuda
