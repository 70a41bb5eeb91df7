// Batch-1 matvec y = W·x over the tiled weight layout (cuda_backend.h), and the fused LM head
// (matvec + soft-cap + argmax).
//
// Work split: a warp owns one tile of 8 rows (or one K-slice of it, when `wk` warps share a
// tile); lane = 8·s + r reads chunk c of row r for c ≡ s (mod 4), so each load instruction of a
// warp covers 4 consecutive chunks × 8 rows = one contiguous span (512 B, 1 KB for Q8_0). Loads
// go around L1 (the weights are read once) and kUnroll of them are in flight per lane before
// the first use. The activation (int8 blocks or f32) is read through the read-only cache: all
// warps of an SM share it. Per lane: 4 (8 for Q8_0) dp4a per quantized block; float weights:
// 8 FMAs per 16-byte chunk. Partial sums: 2 shuffles over s, then (wk > 1) a fixed-order sum of
// the wk warps through shared memory, so results do not depend on the launch geometry except
// through wk.
//
// Portability: plain sm_61+ instructions (dp4a) and PTX ISA 7.4 (CUDA 11.4+); nothing here needs
// sm_90a. Built for sm_90 by default (CMAKE_CUDA_ARCHITECTURES).
#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_util.h"

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
};

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
  static __device__ __forceinline__ float dot(const Raw& w, const Args& a, int c) {
    const int4* xq = reinterpret_cast<const int4*>(a.act_qs) + 2 * c;
    const int4 x0 = __ldg(xq), x1 = __ldg(xq + 1);
    const int2 m = __ldg(a.act_meta + c);
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
  static __device__ __forceinline__ float dot(const Raw& w, const Args& a, int c) {
    const int4* xq = reinterpret_cast<const int4*>(a.act_qs) + 2 * c;
    const int4 x0 = __ldg(xq), x1 = __ldg(xq + 1);
    const int2 m = __ldg(a.act_meta + c);
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
  static __device__ __forceinline__ float dot(const Raw& w, const Args& a, int c) {
    const float4* xv = reinterpret_cast<const float4*>(a.x) + 2 * c;
    const float4 x0 = __ldg(xv), x1 = __ldg(xv + 1);
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

template <DType T, bool kArgmax>
__global__ void __launch_bounds__(kThreads, 4) matvec_kernel(Args a) {
  using C = Chunk<T>;
  constexpr int kUnroll = C::kUnroll;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r = lane % kTileRows, s = lane / kTileRows;
  const int tiles_per_cta = kWarps / a.wk;
  const int tile_in_cta = warp / a.wk, kslice = warp % a.wk;
  const int cstep = a.wk * kLanesPerRow;
  __shared__ float part[kWarps][kTileRows];
  __shared__ unsigned long long best_w[kWarps];
  unsigned long long best = 0;

  // The weights never depend on the previous kernel: start this warp's first loads into L2,
  // then wait for the previous kernel (PDL; a no-op otherwise) before reading the activation.
  {
    const int64_t tile = static_cast<int64_t>(blockIdx.x) * tiles_per_cta + tile_in_cta;
    if (tile < a.ntiles) {
      const size_t tbase = static_cast<size_t>(tile) * a.n_chunks;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = kslice * kLanesPerRow + s + u * cstep;
        if (c < a.n_chunks) {
          asm volatile("prefetch.global.L2 [%0];" ::"l"(a.data + ((tbase + c) * kTileRows + r) * C::kBytes));
        }
      }
    }
  }
  detail::pdl_trigger();
  detail::pdl_wait();

  for (int64_t g = blockIdx.x; g * tiles_per_cta < a.ntiles; g += gridDim.x) {
    const int64_t tile = g * tiles_per_cta + tile_in_cta;
    float acc = 0.0f;
    if (tile < a.ntiles) {
      const size_t tbase = static_cast<size_t>(tile) * a.n_chunks;
      for (int c0 = kslice * kLanesPerRow + s; c0 < a.n_chunks; c0 += cstep * kUnroll) {
        typename C::Raw w[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int c = c0 + u * cstep;
          if (c < a.n_chunks) w[u] = C::load(a, (tbase + c) * kTileRows + r);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int c = c0 + u * cstep;
          if (c < a.n_chunks) acc += C::dot(w[u], a, c);
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
    if (kslice == 0 && lane < kTileRows && tile < a.ntiles) {
      const int64_t row = tile * kTileRows + lane;
      if (row < a.rows) {
        float v = acc;
        if (kArgmax) {
          if (a.softcap > 0.0f) v = a.softcap * tanhf(v / a.softcap);
          const unsigned long long k = argmax_key(v, row);
          best = k > best ? k : best;
          if (a.y) a.y[row] = v;
        } else {
          a.y[row] = v;
        }
      }
    }
  }
  if (kArgmax) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const unsigned long long other = __shfl_xor_sync(0xFFFFFFFFu, best, o);
      best = other > best ? other : best;
    }
    if (lane == 0) best_w[warp] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned long long m = best_w[0];
      for (int w = 1; w < kWarps; ++w) m = best_w[w] > m ? best_w[w] : m;
      // Most CTAs lose against the maximum already stored: skip their atomics.
      if (m > *reinterpret_cast<volatile unsigned long long*>(a.result)) atomicMax(a.result, m);
    }
  }
}

int choose_wk(int64_t ntiles, int n_chunks, int sm_count) {
  // Enough warps to fill the GPU (about 32 per multiprocessor), but at least two chunk steps
  // per lane so that a K-slice is not all overhead.
  const int64_t want = static_cast<int64_t>(sm_count) * 32;
  int wk = 1;
  while (wk < kWarps && ntiles * wk < want && n_chunks >= wk * 2 * kLanesPerRow * 2) wk *= 2;
  return wk;
}

template <bool kArgmax>
void launch(const Stream& s, const DeviceWeight& W, const float* x, const void* act, float* y,
            float softcap, unsigned long long* result, MatvecConfig cfg) {
  if (!matvec_supports(W.dtype)) {
    throw Error(std::string("CUDA matvec: weight type ") + dtype_name(W.dtype) + " is not supported");
  }
  Args a;
  a.data = W.data.as<const uint8_t>();
  a.scales = W.scales.as<const uint16_t>();
  a.rows = W.rows;
  a.ntiles = (W.rows + kTileRows - 1) / kTileRows;
  const bool quant = is_quantized(W.dtype);
  a.n_chunks = static_cast<int>(W.cols / (quant ? 32 : 8));
  if (quant) {
    if (!act) throw Error("CUDA matvec: a quantized weight needs the quantized activation (act)");
    a.act_qs = static_cast<const int8_t*>(act);
    a.act_meta = reinterpret_cast<const int2*>(static_cast<const int8_t*>(act) + W.cols);
  } else {
    if (!x) throw Error("CUDA matvec: an F16/BF16 weight needs the f32 activation (x)");
    a.x = x;
  }
  a.y = y;
  a.softcap = softcap;
  a.result = result;
  int wk = cfg.warps_per_tile;
  if (wk == 0) wk = kArgmax ? 1 : choose_wk(a.ntiles, a.n_chunks, s.sm_count());
  if (wk != 1 && wk != 2 && wk != 4 && wk != 8) {
    throw Error("CUDA matvec: warps_per_tile must be 0, 1, 2, 4 or 8 (got " + std::to_string(wk) + ")");
  }
  a.wk = wk;
  const int64_t groups = (a.ntiles + (kWarps / wk) - 1) / (kWarps / wk);
  // The LM head loops over tile groups so that each CTA does one atomic at the end.
  const int64_t grid = kArgmax ? std::min<int64_t>(groups, static_cast<int64_t>(s.sm_count()) * 8) : groups;
  cudaStream_t st = detail::stream_of(s.handle());
  // The LM head follows its result word's memset, which is no kernel: launched plainly.
  const bool pdl = !kArgmax && detail::pdl_enabled();
  const dim3 g(static_cast<unsigned>(grid)), b(kThreads);
  switch (W.dtype) {
    case DType::Q4_0: detail::launch_kernel(matvec_kernel<DType::Q4_0, kArgmax>, g, b, st, pdl, a); break;
    case DType::Q8_0: detail::launch_kernel(matvec_kernel<DType::Q8_0, kArgmax>, g, b, st, pdl, a); break;
    case DType::F16: detail::launch_kernel(matvec_kernel<DType::F16, kArgmax>, g, b, st, pdl, a); break;
    default: detail::launch_kernel(matvec_kernel<DType::BF16, kArgmax>, g, b, st, pdl, a); break;
  }
}

}  // namespace

void matvec(const Stream& s, const DeviceWeight& W, const float* x_dev, const void* act_dev,
            float* y_dev, MatvecConfig cfg) {
  if (!y_dev) throw Error("CUDA matvec: no output");
  launch<false>(s, W, x_dev, act_dev, y_dev, 0.0f, nullptr, cfg);
}

void lm_head_argmax(const Stream& s, const DeviceWeight& W, const float* x_dev,
                    const void* act_dev, float softcap, uint64_t* result_dev, float* logits_dev,
                    MatvecConfig cfg) {
  if (!result_dev) throw Error("CUDA lm_head_argmax: no result word");
  auto* res = reinterpret_cast<unsigned long long*>(result_dev);
  EG_CUDA_CHECK(cudaMemsetAsync(res, 0, sizeof(*res), detail::stream_of(s.handle())));
  launch<true>(s, W, x_dev, act_dev, logits_dev, softcap, res, cfg);
}

ArgmaxResult decode_argmax(uint64_t key) {
  ArgmaxResult r;
  if (key == 0) return r;  // every logit was NaN
  r.id = static_cast<int32_t>(0xFFFFFFFFull - (key & 0xFFFFFFFFull));
  uint32_t u = static_cast<uint32_t>(key >> 32);
  u = (u & 0x80000000u) ? (u & 0x7FFFFFFFu) : ~u;
  std::memcpy(&r.value, &u, 4);
  return r;
}

}  // namespace eg::cuda
