// Device code shared by the decode kernels (decode_kernels.cu) and the persistent step
// (step_kernel.cu): K/V element loads and stores, CTA reductions, the per-head q/k norm + RoPE,
// and the fused attention work item (flash-decoding split + last-CTA merge). Included by .cu
// files only; everything is internal to the including file.
#pragma once
#include <cuda_fp16.h>

#include <cmath>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/decode_kernels.h"

namespace eg::cuda {
namespace {

constexpr int kMaxHeadDim = 512;
constexpr int kHeadThreads = 128;
constexpr int kAttnWarps = 4;
constexpr int kJointThreads = 512;

__device__ __forceinline__ float f16_to_f32_dev(uint16_t b) { return __half2float(__ushort_as_half(b)); }

__device__ __forceinline__ float kv_load(const void* base, int64_t i, KVElem t) {
  switch (t) {
    case KVElem::F16: return f16_to_f32_dev(static_cast<const uint16_t*>(base)[i]);
    case KVElem::BF16: return __uint_as_float(static_cast<unsigned>(static_cast<const uint16_t*>(base)[i]) << 16);
    default: return static_cast<const float*>(base)[i];
  }
}

template <KVElem kT>
__device__ __forceinline__ float kv_load_t(const void* base, int64_t i) {
  if constexpr (kT == KVElem::F16) return f16_to_f32_dev(static_cast<const uint16_t*>(base)[i]);
  else if constexpr (kT == KVElem::BF16) return __uint_as_float(static_cast<unsigned>(static_cast<const uint16_t*>(base)[i]) << 16);
  else return static_cast<const float*>(base)[i];
}

// The host KVCache's conversions (core/dtype.h): round to nearest even; bf16 NaN stays NaN.
__device__ __forceinline__ void kv_store(void* base, int64_t i, float v, KVElem t) {
  switch (t) {
    case KVElem::F16: static_cast<uint16_t*>(base)[i] = __half_as_ushort(__float2half_rn(v)); break;
    case KVElem::BF16: {
      unsigned u = __float_as_uint(v);
      uint16_t b;
      if ((u & 0x7fffffffu) > 0x7f800000u) b = static_cast<uint16_t>((u >> 16) | 0x40);
      else b = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
      static_cast<uint16_t*>(base)[i] = b;
      break;
    }
    default: static_cast<float*>(base)[i] = v; break;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

// Σ v over the CTA (every thread gets the sum). part: ≥ blockDim/32 floats of shared memory.
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

// ---- q/k norms, RoPE, K/V write ---------------------------------------------------------------

// One head (the whole CTA): rmsnorm(src; nw) when nw (w_offset + w, eps), then RoPE at
// pos, each value passed to put(i, v). tmp: kMaxHeadDim floats of shared memory, part: 4 floats.
template <bool kCoherent = false, class Put>
__device__ __forceinline__ void head_norm_rope(const QKVHeadArgs& a, const float* src, const float* nw, int pos,
                                               float* tmp, float* part, Put&& put) {
  const int hd = a.head_dim;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < hd; i += blockDim.x) {
    const float v = kCoherent ? __ldcg(src + i) : src[i];
    tmp[i] = v;
    ss = fmaf(v, v, ss);
  }
  __syncthreads();
  if (nw) {
    const float t = block_sum(ss, part);
    const float inv = 1.0f / sqrtf(t / static_cast<float>(hd) + a.eps);
    for (int i = threadIdx.x; i < hd; i += blockDim.x) tmp[i] = (tmp[i] * inv) * (a.w_offset + nw[i]);
    __syncthreads();
  }
  const int half = a.rope_dims / 2;
  for (int i = threadIdx.x; i < hd; i += blockDim.x) {
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
    put(i, v);
  }
}

// ---- fused attention (fused.h) ------------------------------------------------------------------

// The value kv_store then kv_load give back.
__device__ __forceinline__ float kv_round(float v, KVElem t) {
  switch (t) {
    case KVElem::F16: return __half2float(__float2half_rn(v));
    case KVElem::BF16: {
      const unsigned u = __float_as_uint(v);
      unsigned b;
      if ((u & 0x7fffffffu) > 0x7f800000u) b = (u >> 16) | 0x40u;
      else b = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
      return __uint_as_float((b & 0xFFFFu) << 16);
    }
    default: return v;
  }
}

static_assert(kAttnWarps * 32 == kHeadThreads, "the fused attention runs head_norm_rope with its CTA");

constexpr int kFusedMaxSplits = 1024;
constexpr int kKeysPerWarpStep = 4;  // keys whose K/V loads a warp has in flight together

__device__ __forceinline__ float block_max(float v, float* part) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float t = -INFINITY;
  for (int k = 0; k < nw; ++k) t = fmaxf(t, part[k]);
  __syncthreads();
  return t;
}

// One warp's online-softmax step over the G keys j .. j + G − 1 (those ≥ end are padding; key j
// is valid): scores (q·k)·scale, soft-capped when softcap > 0; the running max m, sum l and
// Σ p·v in acc updated (flash-decoding). Lane layout of qr / kr / vr: the caller's (the dot is
// completed by warp_sum).
template <int G, int kE>
__device__ __forceinline__ void online_softmax_keys(const AttentionArgs& a, const float (&qr)[kE],
                                                    const float (&kr)[G][kE], const float (&vr)[G][kE], int j,
                                                    int end, float& m, float& l, float (&acc)[kE]) {
  float sc[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    float d = 0.0f;
#pragma unroll
    for (int e = 0; e < kE; ++e) d = fmaf(qr[e], kr[g][e], d);
    sc[g] = warp_sum(d) * a.scale;
    if (a.softcap > 0.0f) sc[g] = a.softcap * tanhf(sc[g] / a.softcap);
    if (j + g >= end) sc[g] = -INFINITY;
  }
  float mn = m;
#pragma unroll
  for (int g = 0; g < G; ++g) mn = fmaxf(mn, sc[g]);
  const float corr = expf(m - mn);  // key j is valid: mn is finite
  float pj[G];
#pragma unroll
  for (int g = 0; g < G; ++g) pj[g] = j + g < end ? expf(sc[g] - mn) : 0.0f;
  l = l * corr;
#pragma unroll
  for (int g = 0; g < G; ++g) l += pj[g];
#pragma unroll
  for (int e = 0; e < kE; ++e) {
    float t = acc[e] * corr;
#pragma unroll
    for (int g = 0; g < G; ++g) t += pj[g] * vr[g][e];
    acc[e] = t;
  }
  m = mn;
}

// CTA (split, head): q head (norm + RoPE) into shared memory; the new K/V row when this split
// holds position pos; online softmax over the split's keys, kKeysPerWarpStep keys per warp at a
// time; the partial {m, l, o} to global memory and, in the last CTA of the head, the combine.
// Splits: at least a.split_min_keys keys each (eff = min(n_splits, ceil(n / min_keys)); CTAs of
// higher splits leave at once). kE ≥ head_dim / 32 (register arrays).
// As a device function of a CTA of kWarps warps: work item (split, h) at position p. kCoherent:
// qkv was written by this same kernel (read through L2, not L1). The merged head goes to outp
// (f32) or, when act_qs is set, as int8 blocks + {d, Σq} (quantize_act's scheme) to act_qs /
// act_meta at element h·hd (the input of the o matvec).
template <int kE, KVElem kT, int kWarps, bool kCoherent>
__device__ __forceinline__ void attn_fused_item(const QKVHeadArgs& qa, const AttentionArgs& a, const float* qkv, int p,
                                                void* kc, void* vc, float* partial, unsigned* counters, float* outp,
                                                int8_t* act_qs, int2* act_meta, int split, int h) {
  constexpr int G = kKeysPerWarpStep;
  constexpr int kAttnWarps = kWarps;
  __shared__ float sq[kMaxHeadDim], sk[kMaxHeadDim], sv[kMaxHeadDim], tmp[kMaxHeadDim];
  __shared__ float sacc[kAttnWarps][kMaxHeadDim];
  __shared__ float sm[kAttnWarps], sl[kAttnWarps], part[kAttnWarps];
  __shared__ float sw[kFusedMaxSplits];
  __shared__ bool is_last;
  const int hd = a.head_dim, E = hd / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = a.n_heads / a.n_kv_heads;
  const int kvh = h / group;
  const int first = a.window > 0 ? max(0, p - a.window + 1) : 0;
  const int n = p - first + 1;
  const int min_keys = max(1, a.split_min_keys);
  const int eff = min(a.n_splits, (n + min_keys - 1) / min_keys);
  if (split >= eff) return;
  const int chunk = (n + eff - 1) / eff;
  const int j0 = first + split * chunk;
  const int j1 = min(p + 1, j0 + chunk);
  // A KV-shared layer (qa.q_only) computes no K/V row: position p is in the cache already.
  const bool has_new = !qa.q_only && j0 <= p && p < j1;
  head_norm_rope<kCoherent>(qa, qkv + static_cast<int64_t>(h) * hd, qa.q_norm_dev, p, tmp, part, [&](int i, float v) { sq[i] = v; });
  __syncthreads();
  if (has_new) {
    const int64_t kv_base = (static_cast<int64_t>(p) * a.n_kv_heads + kvh) * hd;
    const bool writer = h % group == 0;
    head_norm_rope<kCoherent>(qa, qkv + static_cast<int64_t>(a.n_heads + kvh) * hd, qa.k_norm_dev, p, tmp, part,
                   [&](int i, float v) {
                     sk[i] = kv_round(v, a.kv);
                     if (writer) kv_store(kc, kv_base + i, v, a.kv);
                   });
    // V: the v slot, or the raw k projection (K=V layers); Gemma 4's v_norm is an rmsnorm
    // without a weight (qkv_heads' formula and summation order: both CTAs have 128 threads).
    const float* vsrc = qkv + static_cast<int64_t>(a.n_heads + (qa.v_from_k ? 0 : a.n_kv_heads) + kvh) * hd;
    float vinv = 1.0f;
    if (qa.v_norm) {
      float ss = 0.0f;
      for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        const float v = kCoherent ? __ldcg(vsrc + i) : vsrc[i];
        ss = fmaf(v, v, ss);
      }
      vinv = 1.0f / sqrtf(block_sum(ss, part) / static_cast<float>(hd) + qa.eps);
    }
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
      const float raw = kCoherent ? __ldcg(vsrc + i) : vsrc[i];
      const float v = qa.v_norm ? raw * vinv : raw;
      sv[i] = kv_round(v, a.kv);
      if (writer) kv_store(vc, kv_base + i, v, a.kv);
    }
    __syncthreads();
  }
  float qr[kE], acc[kE];
#pragma unroll
  for (int e = 0; e < kE; ++e) {
    qr[e] = e < E ? sq[e * 32 + lane] : 0.0f;
    acc[e] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int j = j0 + warp * G; j < j1; j += kAttnWarps * G) {
    float kr[G][kE], vr[G][kE];
    // Straight-line loads (no branch around them, so all are in flight at once): rows past the
    // split read row j0 and the new row p reads its cached value, both then replaced.
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int jj = j + g;
      const int jc = jj < j1 ? jj : j0;
      const int64_t base = (static_cast<int64_t>(jc) * a.n_kv_heads + kvh) * hd + lane;
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        const int64_t idx = e < E ? base + e * 32 : base;
        kr[g][e] = kv_load_t<kT>(kc, idx);
        vr[g][e] = kv_load_t<kT>(vc, idx);
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const bool ok = j + g < j1, cur = has_new && j + g == p;
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        const bool use = ok && e < E;
        kr[g][e] = !use ? 0.0f : cur ? sk[e * 32 + lane] : kr[g][e];
        vr[g][e] = !use ? 0.0f : cur ? sv[e * 32 + lane] : vr[g][e];
      }
    }
    online_softmax_keys<G, kE>(a, qr, kr, vr, j, j1, m, l, acc);
  }
#pragma unroll
  for (int e = 0; e < kE; ++e)
    if (e < E) sacc[warp][e * 32 + lane] = acc[e];
  if (lane == 0) {
    sm[warp] = m;
    sl[warp] = l;
  }
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w) M = fmaxf(M, sm[w]);
  float* ph = partial + static_cast<int64_t>(h) * a.n_splits * (hd + 2);
  float* out = ph + static_cast<int64_t>(split) * (hd + 2);
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
  // Last CTA of the head merges (publish with a release fence, count, the last one acquires).
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) is_last = atomicAdd(&counters[h], 1u) == static_cast<unsigned>(eff - 1);
  __syncthreads();
  if (!is_last) return;
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  if (threadIdx.x == 0) counters[h] = 0u;  // ready for the next launch
  float mloc = -INFINITY;
  for (int s2 = threadIdx.x; s2 < eff; s2 += blockDim.x) mloc = fmaxf(mloc, __ldcg(ph + s2 * (hd + 2)));
  const float MM = block_max(mloc, part);
  float lsum = 0.0f;
  for (int s2 = threadIdx.x; s2 < eff; s2 += blockDim.x) {
    const float m2 = __ldcg(ph + s2 * (hd + 2));
    const float w = m2 == -INFINITY ? 0.0f : expf(m2 - MM);
    sw[s2] = w;
    lsum += w * __ldcg(ph + s2 * (hd + 2) + 1);
  }
  const float LL = block_sum(lsum, part);  // ends with __syncthreads: sw is complete
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.0f;
#pragma unroll 8
    for (int s2 = 0; s2 < eff; ++s2) o += sw[s2] * __ldcg(ph + s2 * (hd + 2) + 2 + d);
    const float v = o / LL;
    const int64_t i = static_cast<int64_t>(h) * hd + d;
    if (act_qs) detail::quantize_block_warp(v, d & 31, i / 32, act_qs, act_meta);  // hd % 32 == 0: whole warps
    else outp[i] = v;
  }
}


}  // namespace
}  // namespace eg::cuda
