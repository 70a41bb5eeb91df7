// Device code of the batch-1 matvec over the tiled weight layout, shared by matvec.cu (the
// matvec / fused kernels) and step_kernel.cu (the persistent decode step): per-dtype chunk loads
// and dots, the input stage (residual + norms + int8 quantization in shared memory), the tile
// loop with its epilogues. See matvec.cu for the work split. Included by .cu files only;
// everything is internal to the including file.
#pragma once
#include <cuda_fp16.h>

#include <type_traits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/fused.h"

namespace eg::cuda {
namespace {

constexpr int kThreads = 256;  // 8 warps per CTA
constexpr int kWarps = kThreads / 32;
constexpr int kLanesPerRow = 32 / kTileRows;  // 4: lanes that split one row's chunks

// One 16-byte load that does not allocate in L1 (streamed weights).
__device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

__device__ __forceinline__ float f16_bits_to_f32(uint16_t b) { return __half2float(__ushort_as_half(b)); }

struct Args {
  const uint8_t* data = nullptr;      // tiled chunks
  const uint16_t* scales = nullptr;   // tiled f16 block scales (Q4_0/Q8_0)
  const int8_t* act_qs = nullptr;     // quantized activation: K int8
  const int2* act_meta = nullptr;     //   K/32 × {float d, int s}
  const float* x = nullptr;           // f32 activation (F16/BF16)
  float* y = nullptr;
  int64_t rows = 0;
  int64_t ntiles = 0;
  int n_chunks = 0;
  int wk = 1;                         // warps per tile (1, 2, 4, 8)
  float softcap = 0.0f;
  unsigned long long* result = nullptr;  // argmax key (lm head)
  int8_t* q_out = nullptr;            // kGeluQ: the quantized outputs (K int8, then {d, Σq} per block)
  int2* meta_out = nullptr;
  const float* mul = nullptr;         // kGeluBy: y[row] = gelu_tanh(W·h)[row]·mul[row]
  // Input stage (fused kernels, fused.h): the activation is built in shared memory from these.
  const float* in_p = nullptr;
  const float* in_r = nullptr;
  const float* in_w_post = nullptr;
  float* in_r_out = nullptr;
  const float* in_w_norm = nullptr;
  float in_off = 1.0f, in_eps = 1e-6f;
  float in_scale = 1.0f;              // v ·= in_scale (with in_r only; Gemma 4's layer_scalar)
  int K = 0;
};

// Activation loads: through the read-only cache from global memory, plain from shared memory.
template <bool kSmem, class V>
__device__ __forceinline__ V ldx(const V* p) {
  if constexpr (kSmem) return *p;
  else return __ldg(p);
}

// Per-dtype chunk: raw load and the dot with the matching activation slice.
template <DType T>
struct Chunk;

template <>
struct Chunk<DType::Q4_0> {
  static constexpr int kBytes = 16;
  static constexpr int kUnroll = 6;  // loads in flight per lane
  struct Raw { uint4 q; uint16_t d; };
  static __device__ __forceinline__ Raw load(const Args& a, size_t slot) {
    return {ld_stream(a.data + slot * kBytes), __ldg(a.scales + slot)};
  }
  template <bool S>
  static __device__ __forceinline__ float dot(const Raw& w, const int8_t* qs, const int2* meta, const float*, int c) {
    const int4* xq = reinterpret_cast<const int4*>(qs) + 2 * c;
    const int4 x0 = ldx<S>(xq), x1 = ldx<S>(xq + 1);
    const int2 m = ldx<S>(meta + c);
    constexpr unsigned kLo = 0x0F0F0F0Fu;
    // Byte j of the block: element j (low nibble) and element 16 + j (high nibble).
    int i = __dp4a(static_cast<int>(w.q.x & kLo), x0.x, 0);
    i = __dp4a(static_cast<int>(w.q.y & kLo), x0.y, i);
    i = __dp4a(static_cast<int>(w.q.z & kLo), x0.z, i);
    i = __dp4a(static_cast<int>(w.q.w & kLo), x0.w, i);
    i = __dp4a(static_cast<int>((w.q.x >> 4) & kLo), x1.x, i);
    i = __dp4a(static_cast<int>((w.q.y >> 4) & kLo), x1.y, i);
    i = __dp4a(static_cast<int>((w.q.z >> 4) & kLo), x1.z, i);
    i = __dp4a(static_cast<int>((w.q.w >> 4) & kLo), x1.w, i);
    i -= 8 * m.y;  // the −8 offset of every nibble, exactly, through Σ q_x
    return (f16_bits_to_f32(w.d) * __int_as_float(m.x)) * static_cast<float>(i);
  }
};

template <>
struct Chunk<DType::Q8_0> {
  static constexpr int kBytes = 32;
  static constexpr int kUnroll = 4;
  struct Raw { uint4 lo, hi; uint16_t d; };
  static __device__ __forceinline__ Raw load(const Args& a, size_t slot) {
    const uint8_t* p = a.data + slot * kBytes;
    return {ld_stream(p), ld_stream(p + 16), __ldg(a.scales + slot)};
  }
  template <bool S>
  static __device__ __forceinline__ float dot(const Raw& w, const int8_t* qs, const int2* meta, const float*, int c) {
    const int4* xq = reinterpret_cast<const int4*>(qs) + 2 * c;
    const int4 x0 = ldx<S>(xq), x1 = ldx<S>(xq + 1);
    const int2 m = ldx<S>(meta + c);
    int i = __dp4a(static_cast<int>(w.lo.x), x0.x, 0);
    i = __dp4a(static_cast<int>(w.lo.y), x0.y, i);
    i = __dp4a(static_cast<int>(w.lo.z), x0.z, i);
    i = __dp4a(static_cast<int>(w.lo.w), x0.w, i);
    i = __dp4a(static_cast<int>(w.hi.x), x1.x, i);
    i = __dp4a(static_cast<int>(w.hi.y), x1.y, i);
    i = __dp4a(static_cast<int>(w.hi.z), x1.z, i);
    i = __dp4a(static_cast<int>(w.hi.w), x1.w, i);
    return (f16_bits_to_f32(w.d) * __int_as_float(m.x)) * static_cast<float>(i);
  }
};

// Two f16/bf16 in one word: element 2k in the low half, 2k+1 in the high half.
__device__ __forceinline__ float2 unpack2(unsigned u, DType t) {
  if (t == DType::BF16) return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xFFFF0000u));
  return make_float2(f16_bits_to_f32(static_cast<uint16_t>(u & 0xFFFFu)),
                     f16_bits_to_f32(static_cast<uint16_t>(u >> 16)));
}

template <DType T>
struct FloatChunk {
  static constexpr int kBytes = 16;
  static constexpr int kUnroll = 8;
  struct Raw { uint4 q; };
  static __device__ __forceinline__ Raw load(const Args& a, size_t slot) {
    return {ld_stream(a.data + slot * kBytes)};
  }
  template <bool S>
  static __device__ __forceinline__ float dot(const Raw& w, const int8_t*, const int2*, const float* x, int c) {
    const float4* xv = reinterpret_cast<const float4*>(x) + 2 * c;
    const float4 x0 = ldx<S>(xv), x1 = ldx<S>(xv + 1);
    const float2 e0 = unpack2(w.q.x, T), e1 = unpack2(w.q.y, T), e2 = unpack2(w.q.z, T),
                 e3 = unpack2(w.q.w, T);
    float s = e0.x * x0.x;
    s = fmaf(e0.y, x0.y, s);
    s = fmaf(e1.x, x0.z, s);
    s = fmaf(e1.y, x0.w, s);
    s = fmaf(e2.x, x1.x, s);
    s = fmaf(e2.y, x1.y, s);
    s = fmaf(e3.x, x1.z, s);
    s = fmaf(e3.y, x1.w, s);
    return s;
  }
};
template <>
struct Chunk<DType::F16> : FloatChunk<DType::F16> {};
template <>
struct Chunk<DType::BF16> : FloatChunk<DType::BF16> {};

// Orderable key of (value, row): larger value wins, then the lower row. NaN → 0 (never chosen).
__device__ __forceinline__ unsigned long long argmax_key(float v, int64_t row) {
  if (v != v) return 0ull;
  unsigned u = __float_as_uint(v);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<unsigned long long>(u) << 32) | (0xFFFFFFFFull - static_cast<unsigned long long>(row));
}

// Epilogues: store y, GELU-tanh(gate)·up of an interleaved gate|up matrix (fused.h), the LM
// head's soft-cap + argmax, or GELU-tanh(y)·mul (kGeluBy: Gemma 4's PLE gate).
// kGeluQ (wk = 1 only): as kGelu, but the 32 outputs of a CTA's 8 tiles are quantized as one
// block (quantize_act's scheme) into q_out / meta_out instead of stored as f32.
enum Epi : int { kStore = 0, kGelu = 1, kArgmaxEpi = 2, kGeluQ = 3, kGeluBy = 4 };

__host__ __device__ constexpr bool quantized_dtype(DType t) { return t == DType::Q4_0 || t == DType::Q8_0; }

// ops::gelu_tanh_mul's roundings (unfused), as gelu_mul_kernel.
__device__ __forceinline__ float gelu_tanh_mul_dev(float z, float u) {
  const float k0 = 0.7978845608028654f, k1 = 0.044715f;
  const float inner = __fmul_rn(k0, __fadd_rn(z, __fmul_rn(__fmul_rn(__fmul_rn(k1, z), z), z)));
  const float g = __fmul_rn(__fmul_rn(0.5f, z), __fadd_rn(1.0f, tanhf(inner)));
  return __fmul_rn(g, u);
}

// Σ v over the CTA in a fixed order (warp shuffles, then the warps in order); every thread gets it.
__device__ __forceinline__ float cta_sum(float v, float* part) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  float t = 0.0f;
#pragma unroll
  for (int k = 0; k < kWarps; ++k) t += part[k];
  __syncthreads();
  return t;
}

// Bytes of the activation part of a fused kernel's dynamic shared memory (16-byte multiple).
__host__ __device__ constexpr size_t stage_act_bytes(bool quant, int K) {
  return ((quant ? static_cast<size_t>(K) + static_cast<size_t>(K / 32) * 8 : static_cast<size_t>(K) * 4) + 15) / 16 * 16;
}

// Copies n floats of each of up to 4 vectors into shared memory, kBatch loads in flight per thread
// (the input stage's only global reads: one or two memory round trips instead of one per element).
constexpr int kBatch = 8;
template <bool kCoherent>
__device__ __forceinline__ float ld_in(const float* p) {
  if constexpr (kCoherent) return __ldcg(p);
  else return __ldg(p);
}
template <bool kCoherent>
__device__ __forceinline__ void stage_load(int K, const float* __restrict__ a0, const float* __restrict__ a1,
                                           const float* __restrict__ a2, const float* __restrict__ a3, float* sm) {
  for (int i0 = threadIdx.x; i0 < K; i0 += kThreads * kBatch) {
    float t0[kBatch], t1[kBatch], t2[kBatch], t3[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = i0 + u * kThreads;
      const bool ok = i < K;
      t0[u] = ok ? ld_in<kCoherent>(a0 + i) : 0.0f;
      t1[u] = ok && a1 ? ld_in<kCoherent>(a1 + i) : 0.0f;
      t2[u] = ok && a2 ? ld_in<kCoherent>(a2 + i) : 0.0f;
      t3[u] = ok && a3 ? ld_in<kCoherent>(a3 + i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = i0 + u * kThreads;
      if (i < K) {
        sm[i] = t0[u];
        if (a1) sm[K + i] = t1[u];
        if (a2) sm[2 * K + i] = t2[u];
        if (a3) sm[3 * K + i] = t3[u];
      }
    }
  }
}

// The input stage (fused.h, MatvecInput; kCoherent: the inputs were written by this same kernel,
// so they are read through L2, not the read-only cache): v = (r + rmsnorm(p; w_post))·in_scale
// (or p), written to r_out by CTA 0; h = rmsnorm(v; w_norm) (or v); then h quantized (int8 blocks
// + {d, Σq}, quantize_act's scheme) or as f32 into shared memory `dyn`. Every CTA computes the
// same values in the same order; the explicit roundings keep v identical between CTAs. The inputs
// are read once, into the scratch part of `dyn` (after the activation): [p | w_norm | r | w_post].
template <bool kQuant, bool kCoherent = false>
__device__ void build_input(const Args& a, unsigned char* dyn, float* part) {
  const int K = a.K;
  const float off = a.in_off;
  float* sc = reinterpret_cast<float*>(dyn + stage_act_bytes(kQuant, K));
  float* sp = sc;
  float* swn = sc + K;
  float* sr = sc + 2 * K;
  float* swp = sc + 3 * K;
  stage_load<kCoherent>(K, a.in_p, a.in_w_norm, a.in_r, a.in_w_post, sc);
  __syncthreads();
  if (a.in_r) {
    float ss = 0.0f;
    for (int i = threadIdx.x; i < K; i += kThreads) ss = fmaf(sp[i], sp[i], ss);
    const float inv1 = 1.0f / sqrtf(cta_sum(ss, part) / static_cast<float>(K) + a.in_eps);
    const bool write_r = a.in_r_out && blockIdx.x == 0;
    for (int i = threadIdx.x; i < K; i += kThreads) {
      const float v =
          __fmul_rn(__fadd_rn(sr[i], __fmul_rn(__fmul_rn(sp[i], inv1), __fadd_rn(off, swp[i]))), a.in_scale);
      sp[i] = v;  // each thread rewrites only its own elements
      if (write_r) a.in_r_out[i] = v;
    }
  } else if (a.in_r_out && blockIdx.x == 0) {
    for (int i = threadIdx.x; i < K; i += kThreads) a.in_r_out[i] = sp[i];
  }
  float inv2 = 0.0f;
  if (a.in_w_norm) {
    float ss = 0.0f;
    for (int i = threadIdx.x; i < K; i += kThreads) ss = fmaf(sp[i], sp[i], ss);
    inv2 = 1.0f / sqrtf(cta_sum(ss, part) / static_cast<float>(K) + a.in_eps);
  }
  if constexpr (kQuant) {
    // 4 elements per thread, 8 threads per 32-block (quantize_act's scheme, bit for bit: amax
    // and Σq do not depend on the order). K % 32 == 0, so an 8-lane group is all in or all out.
    int8_t* qs = reinterpret_cast<int8_t*>(dyn);
    int2* meta = reinterpret_cast<int2*>(dyn + K);
    const int lane = threadIdx.x & 31;
    const unsigned gmask = 0xFFu << (lane & 24);
    for (int q4 = threadIdx.x; q4 < K / 4; q4 += kThreads) {
      float hv[4];
      float amax = 0.0f;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int i = 4 * q4 + u;
        const float v = sp[i];
        hv[u] = a.in_w_norm ? __fmul_rn(__fmul_rn(v, inv2), __fadd_rn(off, swn[i])) : v;
        amax = fmaxf(amax, fabsf(hv[u]));
      }
      amax = fmaxf(amax, __shfl_xor_sync(gmask, amax, 1));
      amax = fmaxf(amax, __shfl_xor_sync(gmask, amax, 2));
      amax = fmaxf(amax, __shfl_xor_sync(gmask, amax, 4));
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      int packed = 0, sum = 0;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        int q = static_cast<int>(rintf(hv[u] * id));
        q = q < -127 ? -127 : (q > 127 ? 127 : q);
        sum += q;
        packed |= (q & 0xFF) << (8 * u);
      }
      reinterpret_cast<int*>(qs)[q4] = packed;
      sum += __shfl_xor_sync(gmask, sum, 1);
      sum += __shfl_xor_sync(gmask, sum, 2);
      sum += __shfl_xor_sync(gmask, sum, 4);
      if ((lane & 7) == 0) meta[q4 / 8] = make_int2(__float_as_int(d), sum);
    }
  } else {
    float* xf = reinterpret_cast<float*>(dyn);
    for (int i = threadIdx.x; i < K; i += kThreads) {
      const float v = sp[i];
      xf[i] = a.in_w_norm ? __fmul_rn(__fmul_rn(v, inv2), __fadd_rn(off, swn[i])) : v;
    }
  }
  __syncthreads();
}

// Loads in flight per lane of the matvec kernels (matvec.cu), which issue the first batch before
// the programmatic-launch wait: a lane's whole share of most decode matrices.
template <DType T>
constexpr int kWideUnroll = T == DType::Q8_0 ? 6 : 12;

// The first batch of this warp's chunks of tile group g0 (matvec_tiles' first loads), into w.
template <DType T, int kU>
__device__ __forceinline__ void preload_chunks(const Args& a, int64_t g0, typename Chunk<T>::Raw (&w)[kU]) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r = lane % kTileRows, s = lane / kTileRows;
  const int tile_in_cta = warp / a.wk, kslice = warp % a.wk;
  const int cstep = a.wk * kLanesPerRow;
  const int64_t tile = g0 * (kWarps / a.wk) + tile_in_cta;
  if (tile >= a.ntiles) return;
  const size_t tbase = static_cast<size_t>(tile) * a.n_chunks;
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int c = kslice * kLanesPerRow + s + u * cstep;
    if (c < a.n_chunks) w[u] = Chunk<T>::load(a, (tbase + c) * kTileRows + r);
  }
}

// The tile groups g0, g0 + gstep, ... of y = W·h (the matvec kernels' main loop): warp w of the
// CTA takes tile g·(kWarps / wk) + w / wk, K-slice w % wk. qs/meta (quantized) or xf (f32) is the
// activation, in shared memory when kSmem. part: kWarps × kTileRows floats of shared memory.
// best: the argmax epilogue's running key. Every thread of the CTA must call it (it syncs).
// kPre > 0: pre holds group g0's first kPre chunks of this lane (preload_chunks<T, kPre>).
template <DType T, int kEpi, bool kSmem, int kPre = 0>
__device__ __forceinline__ void matvec_tiles(const Args& a, const int8_t* qs, const int2* meta, const float* xf,
                                             float (*part)[kTileRows], unsigned long long& best, int64_t g0,
                                             int64_t gstep, const typename Chunk<T>::Raw* pre = nullptr) {
  using C = Chunk<T>;
  constexpr int kUnroll = C::kUnroll;
  constexpr bool kArgmax = kEpi == kArgmaxEpi;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r = lane % kTileRows, s = lane / kTileRows;
  const int tiles_per_cta = kWarps / a.wk;
  const int tile_in_cta = warp / a.wk, kslice = warp % a.wk;
  const int cstep = a.wk * kLanesPerRow;
  // One tile group; kFirst: group g0, whose first kPre chunks are in `pre` (peeled, so that pre
  // is dead after it).
  auto group = [&](int64_t g, auto first) {
    constexpr bool kFirst = decltype(first)::value;
    const int64_t tile = g * tiles_per_cta + tile_in_cta;
    float acc = 0.0f;
    if (tile < a.ntiles) {
      const size_t tbase = static_cast<size_t>(tile) * a.n_chunks;
      int start = kslice * kLanesPerRow + s;
      if constexpr (kFirst && kPre > 0) {
#pragma unroll
        for (int u = 0; u < kPre; ++u) {
          const int c = start + u * cstep;
          if (c < a.n_chunks) acc += C::template dot<kSmem>(pre[u], qs, meta, xf, c);
        }
        start += cstep * kPre;
      }
      for (int c0 = start; c0 < a.n_chunks; c0 += cstep * kUnroll) {
        typename C::Raw w[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int c = c0 + u * cstep;
          if (c < a.n_chunks) w[u] = C::load(a, (tbase + c) * kTileRows + r);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int c = c0 + u * cstep;
          if (c < a.n_chunks) acc += C::template dot<kSmem>(w[u], qs, meta, xf, c);
        }
      }
    }
    acc += __shfl_xor_sync(0xFFFFFFFFu, acc, 8);
    acc += __shfl_xor_sync(0xFFFFFFFFu, acc, 16);
    if (a.wk > 1) {
      if (lane < kTileRows) part[warp][lane] = acc;
      __syncthreads();
      if (kslice == 0 && lane < kTileRows) {
        acc = part[warp][lane];
        for (int k = 1; k < a.wk; ++k) acc += part[warp + k][lane];
      }
      __syncthreads();
    }
    if constexpr (kEpi == kGeluQ) {
      // wk == 1: warp w holds tile 8g + w, i.e. outputs 32g + 4w .. 32g + 4w + 3.
      const float up = __shfl_down_sync(0xFFFFFFFFu, acc, 4);
      float* blk = &part[0][0];
      if (lane < kTileRows / 2) blk[warp * 4 + lane] = tile < a.ntiles ? gelu_tanh_mul_dev(acc, up) : 0.0f;
      __syncthreads();
      if (warp == 0 && g * 32 < a.rows / 2) detail::quantize_block_warp(blk[lane], lane, g, a.q_out, a.meta_out);
      __syncthreads();
    } else if constexpr (kEpi == kGelu) {
      // Rows 0..3 of a tile are gate rows 4t..4t+3, rows 4..7 the up rows of the same outputs.
      const float up = __shfl_down_sync(0xFFFFFFFFu, acc, 4);
      if (kslice == 0 && lane < kTileRows / 2 && tile < a.ntiles) {
        const int64_t i = tile * (kTileRows / 2) + lane;
        if (i < a.rows / 2) a.y[i] = gelu_tanh_mul_dev(acc, up);
      }
    } else if (kslice == 0 && lane < kTileRows && tile < a.ntiles) {
      const int64_t row = tile * kTileRows + lane;
      if (row < a.rows) {
        float v = acc;
        if (kArgmax) {
          if (a.softcap > 0.0f) v = a.softcap * tanhf(v / a.softcap);
          const unsigned long long k = argmax_key(v, row);
          best = k > best ? k : best;
          if (a.y) a.y[row] = v;
        } else if constexpr (kEpi == kGeluBy) {
          a.y[row] = gelu_tanh_mul_dev(v, a.mul[row]);
        } else {
          a.y[row] = v;
        }
      }
    }
  };
  if constexpr (kPre > 0) {
    if (g0 * tiles_per_cta >= a.ntiles) return;
    group(g0, std::true_type{});
    for (int64_t g = g0 + gstep; g * tiles_per_cta < a.ntiles; g += gstep) group(g, std::false_type{});
  } else {
    for (int64_t g = g0; g * tiles_per_cta < a.ntiles; g += gstep) group(g, std::false_type{});
  }
}

}  // namespace
}  // namespace eg::cuda
