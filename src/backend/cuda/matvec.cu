// Batch-1 matvec y = W·x over the tiled weight layout (cuda_backend.h), the fused LM head
// (matvec + soft-cap + argmax), and the fused variants of fused.h (an input stage that builds the
// activation in shared memory: residual + norms + quantization; a GELU·up epilogue).
//
// Work split: a warp owns one tile of 8 rows (or one K-slice of it, when `wk` warps share a
// tile); lane = 8·s + r reads chunk c of row r for c ≡ s (mod 4), so each load instruction of a
// warp covers 4 consecutive chunks × 8 rows = one contiguous span (512 B, 1 KB for Q8_0). Loads
// go around L1 (the weights are read once). A lane's first kWideUnroll chunks (12, 6 for Q8_0:
// for most decode matrices its whole share) go to registers before the wait for the previous
// kernel (PDL) and the input stage, since weights never depend on it; the rest kUnroll at a time.
// Warps per tile (wk): the fewest that still give every multiprocessor a CTA. The activation (int8 blocks or f32) is read through the read-only cache: all
// warps of an SM share it. Per lane: 4 (8 for Q8_0) dp4a per quantized block; float weights:
// 8 FMAs per 16-byte chunk. Partial sums: 2 shuffles over s, then (wk > 1) a fixed-order sum of
// the wk warps through shared memory, so results do not depend on the launch geometry except
// through wk.
//
// Portability: plain sm_61+ instructions (dp4a) and PTX ISA 7.4 (CUDA 11.4+); nothing here needs
// sm_90a. Built for sm_90 by default (CMAKE_CUDA_ARCHITECTURES).
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/fused.h"
#include "backend/cuda/matvec_device.cuh"
#include "backend/cuda/q6k.h"

namespace eg::cuda {
namespace {

template <DType T, int kEpi, bool kStage>
__global__ void __launch_bounds__(kThreads, 2) matvec_kernel(Args a) {
  constexpr int kU = kWideUnroll<T>;
  constexpr bool kArgmax = kEpi == kArgmaxEpi;
  extern __shared__ __align__(16) unsigned char dyn[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __shared__ float part[kWarps][kTileRows];
  __shared__ unsigned long long best_w[kWarps];
  unsigned long long best = 0;

  // The weights never depend on the previous kernel: this warp's first kU chunks go to registers
  // before the wait for the previous kernel (PDL; a no-op otherwise) and the input stage.
  typename Chunk<T>::Raw pre[kU];
  preload_chunks<T, kU>(a, blockIdx.x, pre);
  detail::pdl_trigger();
  detail::pdl_wait();

  const int8_t* qs = a.act_qs;
  const int2* meta = a.act_meta;
  const float* xf = a.x;
  if constexpr (kStage) {
    build_input<quantized_dtype(T)>(a, dyn, &part[0][0]);
    qs = reinterpret_cast<const int8_t*>(dyn);
    meta = reinterpret_cast<const int2*>(dyn + a.K);
    xf = reinterpret_cast<const float*>(dyn);
  }

  matvec_tiles<T, kEpi, kStage, kU>(a, qs, meta, xf, part, best, blockIdx.x, gridDim.x, pre);
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
  static const bool legacy = [] {
    const char* v = std::getenv("EG_CUDA_MV_WK");  // tuning: "legacy" = the rule before 2026-12-03
    return v && std::string(v) == "legacy";
  }();
  int wk = 1;
  if (legacy) {
    // Enough warps to fill the GPU (about 32 per multiprocessor), but at least two chunk steps
    // per lane so that a K-slice is not all overhead.
    const int64_t want = static_cast<int64_t>(sm_count) * 32;
    while (wk < kWarps && ntiles * wk < want && n_chunks >= wk * 2 * kLanesPerRow * 2) wk *= 2;
    return wk;
  }
  // The fewest warps per tile that still give every multiprocessor a CTA (a lane then holds up
  // to kWideUnroll chunks in flight, issued before the wait), at least two chunks per lane.
  while (wk < kWarps && (ntiles * wk + kWarps - 1) / kWarps < sm_count && n_chunks >= 2 * wk * 2 * kLanesPerRow) wk *= 2;
  return wk;
}

// Fills the weight part of Args and the launch shape; checks the dtype.
Args weight_args(const Stream& s, const DeviceWeight& W, bool argmax, MatvecConfig cfg, int64_t* grid) {
  if (!matvec_supports(W.dtype)) {
    throw Error(std::string("CUDA matvec: weight type ") + dtype_name(W.dtype) + " is not supported");
  }
  Args a;
  a.data = W.data.as<const uint8_t>();
  a.scales = W.scales.as<const uint16_t>();
  a.rows = W.rows;
  a.ntiles = (W.rows + kTileRows - 1) / kTileRows;
  a.n_chunks = static_cast<int>(W.cols / (is_quantized(W.dtype) ? 32 : 8));
  a.K = static_cast<int>(W.cols);
  int wk = cfg.warps_per_tile;
  if (wk == 0) wk = argmax ? 1 : choose_wk(a.ntiles, a.n_chunks, s.sm_count());
  if (wk != 1 && wk != 2 && wk != 4 && wk != 8) {
    throw Error("CUDA matvec: warps_per_tile must be 0, 1, 2, 4 or 8 (got " + std::to_string(wk) + ")");
  }
  a.wk = wk;
  const int64_t groups = (a.ntiles + (kWarps / wk) - 1) / (kWarps / wk);
  // The LM head loops over tile groups so that each CTA does one atomic at the end.
  *grid = argmax ? std::min<int64_t>(groups, static_cast<int64_t>(s.sm_count()) * 8) : groups;
  return a;
}

template <DType T, int kEpi, bool kStage>
void launch_typed(const Args& a, int64_t grid, size_t smem, cudaStream_t st, bool pdl) {
  auto* k = matvec_kernel<T, kEpi, kStage>;
  // The input stage's activation + scratch (48 KiB exactly for an f32 K = 6,144 stage, which with
  // the static arrays passes the default limit: E2B's BF16 down projection).
  if (smem > 0) detail::ensure_dynamic_smem(k, smem, "matvec (fused input stage)");
  detail::launch_kernel_smem(k, dim3(static_cast<unsigned>(grid)), dim3(kThreads), smem, st, pdl, a);
}

template <int kEpi, bool kStage>
void launch_args(const Stream& s, DType t, const Args& a, int64_t grid, bool pdl) {
  // Fused: the activation, then the scratch copies of the stage's inputs (build_input).
  const int n_in = a.in_r ? 4 : a.in_w_norm ? 2 : 1;
  const size_t smem = !kStage ? 0 : stage_act_bytes(is_quantized(t), a.K) + static_cast<size_t>(n_in) * 4 * a.K;
  cudaStream_t st = detail::stream_of(s.handle());
  switch (t) {
    case DType::Q4_0: launch_typed<DType::Q4_0, kEpi, kStage>(a, grid, smem, st, pdl); break;
    case DType::Q8_0: launch_typed<DType::Q8_0, kEpi, kStage>(a, grid, smem, st, pdl); break;
    case DType::F16: launch_typed<DType::F16, kEpi, kStage>(a, grid, smem, st, pdl); break;
    default: launch_typed<DType::BF16, kEpi, kStage>(a, grid, smem, st, pdl); break;
  }
}

template <bool kArgmax>
void launch(const Stream& s, const DeviceWeight& W, const float* x, const void* act, float* y,
            float softcap, unsigned long long* result, MatvecConfig cfg) {
  int64_t grid = 0;
  Args a = weight_args(s, W, kArgmax, cfg, &grid);
  if (is_quantized(W.dtype)) {
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
  // The LM head follows its result word's memset, which is no kernel: launched plainly.
  const bool pdl = !kArgmax && detail::pdl_enabled();
  launch_args<kArgmax ? kArgmaxEpi : kStore, false>(s, W.dtype, a, grid, pdl);
}

// The fused kernels (fused.h): input stage, then one of the epilogues.
template <int kEpi>
void launch_fused(const Stream& s, const DeviceWeight& W, const MatvecInput& in, float* y, float softcap,
                  unsigned long long* result, const float* mul = nullptr) {
  if (!in.src_dev) throw Error("CUDA fused matvec: no input vector");
  if (in.residual_dev && !in.w_post_dev) throw Error("CUDA fused matvec: a residual needs w_post");
  if (in.residual_out_dev && (in.residual_out_dev == in.residual_dev || in.residual_out_dev == in.src_dev))
    throw Error("CUDA fused matvec: residual_out must not alias the inputs");
  if (W.cols % 32 != 0) throw Error("CUDA fused matvec: cols " + std::to_string(W.cols) + " is not a multiple of 32");
  int64_t grid = 0;
  Args a = weight_args(s, W, kEpi == kArgmaxEpi, {}, &grid);
  a.in_p = in.src_dev;
  a.in_r = in.residual_dev;
  a.in_w_post = in.w_post_dev;
  a.in_r_out = in.residual_out_dev;
  a.in_w_norm = in.w_norm_dev;
  a.in_off = in.w_offset;
  a.in_eps = in.eps;
  a.in_scale = in.scale;
  a.y = y;
  a.softcap = softcap;
  a.result = result;
  a.mul = mul;
  launch_args<kEpi, true>(s, W.dtype, a, grid, detail::pdl_enabled());
}

}  // namespace

void matvec_fused(const Stream& s, const DeviceWeight& W, const MatvecInput& in, float* y_dev) {
  if (!y_dev) throw Error("CUDA matvec_fused: no output");
  launch_fused<kStore>(s, W, in, y_dev, 0.0f, nullptr);
}

void matvec_gelu_fused(const Stream& s, const DeviceWeight& W_interleaved, const MatvecInput& in, float* y_dev) {
  if (!y_dev) throw Error("CUDA matvec_gelu_fused: no output");
  if (W_interleaved.rows % kTileRows != 0)
    throw Error("CUDA matvec_gelu_fused: rows " + std::to_string(W_interleaved.rows) + " are not a multiple of 8");
  launch_fused<kGelu>(s, W_interleaved, in, y_dev, 0.0f, nullptr);
}

void matvec_gelu_by_fused(const Stream& s, const DeviceWeight& W, const MatvecInput& in, const float* mul_dev,
                          float* y_dev) {
  if (!y_dev || !mul_dev) throw Error("CUDA matvec_gelu_by_fused: no output or no multiplier");
  launch_fused<kGeluBy>(s, W, in, y_dev, 0.0f, nullptr, mul_dev);
}

void lm_head_argmax_fused(const Stream& s, const DeviceWeight& W, const MatvecInput& in, float softcap,
                          uint64_t* result_dev, float* logits_dev) {
  if (!result_dev) throw Error("CUDA lm_head_argmax_fused: no result word");
  if (W.dtype == DType::Q6_K) throw Error("CUDA lm_head_argmax_fused: a Q6_K LM head takes rmsnorm + lm_head_argmax");
  launch_fused<kArgmaxEpi>(s, W, in, logits_dev, softcap, reinterpret_cast<unsigned long long*>(result_dev));
}

std::string interleave_gate_up(const void* gate, const void* up, DType t, int64_t rows, int64_t cols) {
  if (rows % 4 != 0) throw Error("interleave_gate_up: rows " + std::to_string(rows) + " are not a multiple of 4");
  const size_t rb = dtype_row_bytes(t, cols);
  std::string out(static_cast<size_t>(2 * rows) * rb, '\0');
  const auto* g = static_cast<const char*>(gate);
  const auto* u = static_cast<const char*>(up);
  for (int64_t q = 0; q < rows / 4; ++q) {
    std::memcpy(&out[static_cast<size_t>(8 * q) * rb], g + static_cast<size_t>(4 * q) * rb, 4 * rb);
    std::memcpy(&out[static_cast<size_t>(8 * q + 4) * rb], u + static_cast<size_t>(4 * q) * rb, 4 * rb);
  }
  return out;
}

void matvec(const Stream& s, const DeviceWeight& W, const float* x_dev, const void* act_dev,
            float* y_dev, MatvecConfig cfg) {
  if (!y_dev) throw Error("CUDA matvec: no output");
  if (W.dtype == DType::Q6_K) return matvec_q6k(s, W, x_dev, y_dev, 0.0f, nullptr);
  launch<false>(s, W, x_dev, act_dev, y_dev, 0.0f, nullptr, cfg);
}

void lm_head_argmax(const Stream& s, const DeviceWeight& W, const float* x_dev,
                    const void* act_dev, float softcap, uint64_t* result_dev, float* logits_dev,
                    MatvecConfig cfg) {
  if (!result_dev) throw Error("CUDA lm_head_argmax: no result word");
  auto* res = reinterpret_cast<unsigned long long*>(result_dev);
  EG_CUDA_CHECK(cudaMemsetAsync(res, 0, sizeof(*res), detail::stream_of(s.handle())));
  if (W.dtype == DType::Q6_K) return matvec_q6k(s, W, x_dev, logits_dev, softcap, result_dev);
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
