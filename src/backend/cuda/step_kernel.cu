// The persistent decode step (step_kernel.h). One cooperative launch of `grid` CTAs of 256
// threads runs every layer; the phases of a layer are separated by grid barriers (a monotonic
// 64-bit arrival counter: barrier k of a launch completes when the counter reaches
// barrier_base + (k + 1)·grid). Data written inside the launch is read through L2 (__ldcg),
// never through L1 or the read-only cache, which are not coherent between multiprocessors.
//
// Portability: plain sm_70+ PTX (ld.acquire.gpu, prefetch.global.L2); builds with nvcc 11.8.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "backend/cuda/attention_device.cuh"
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/matvec_device.cuh"
#include "backend/cuda/step_kernel.h"

namespace eg::cuda {
namespace {

constexpr int kPhasesPerLayer = 5;  // qkv | attention | o | gate|up | down

// All CTAs arrive, then wait until the counter reaches target (≈ 2 s without progress: a bug,
// the kernel traps rather than hang the device). kBar 1: the arrival is a release reduction and
// every CTA polls the counter; kBar 2: the arrival is an acq_rel atomic, the last CTA to arrive
// publishes target on a flag in its own 128-byte line, and the others poll that line (so the
// polls do not compete with the arrivals). bar[0]: the counter, bar[16]: the flag.
template <int kBar>
__device__ __forceinline__ void grid_barrier(unsigned long long* bar, unsigned long long& target) {
  __syncthreads();
  target += gridDim.x;
  if (threadIdx.x == 0) {
    unsigned long long* poll = bar;
    if constexpr (kBar == 2) {
      unsigned long long old;
      asm volatile("atom.acq_rel.gpu.global.add.u64 %0, [%1], 1;" : "=l"(old) : "l"(bar) : "memory");
      poll = bar + 16;
      if (old + 1 == target) asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(poll), "l"(target) : "memory");
    } else {
      asm volatile("red.release.gpu.global.add.u64 [%0], 1;" ::"l"(bar) : "memory");
    }
    const long long t0 = clock64();
    unsigned long long v;
    for (;;) {
      asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(poll) : "memory");
      if (v >= target) break;
      if (clock64() - t0 > (4ll << 30)) __trap();
    }
  }
  __syncthreads();
}

// This CTA's share of a matrix's bytes, hinted into L2.
__device__ __forceinline__ void prefetch_matrix(const StepMatrix& m) {
  const int64_t ntiles = (m.rows + kTileRows - 1) / kTileRows;
  const bool q4 = m.dtype == static_cast<int>(DType::Q4_0);
  const int64_t n_chunks = m.cols / 32;
  const int64_t data_bytes = ntiles * n_chunks * kTileRows * (q4 ? 16 : 32);
  const int64_t scale_bytes = ntiles * n_chunks * kTileRows * 2;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kThreads * 128;
  for (int64_t off = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * 128; off < data_bytes; off += step)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(m.data + off));
  for (int64_t off = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * 128; off < scale_bytes; off += step)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<const uint8_t*>(m.scales) + off));
}

__device__ __forceinline__ void prefetch_layer(const StepLayer& L) {
  prefetch_matrix(L.qkv);
  prefetch_matrix(L.o);
  prefetch_matrix(L.gu);
  prefetch_matrix(L.down);
}

__device__ __forceinline__ Args matrix_args(const StepMatrix& m) {
  Args a;
  a.data = m.data;
  a.scales = m.scales;
  a.rows = m.rows;
  a.ntiles = (m.rows + kTileRows - 1) / kTileRows;
  a.n_chunks = static_cast<int>(m.cols / 32);
  a.wk = m.wk;
  a.K = static_cast<int>(m.cols);
  return a;
}

// y = W·h with h already in shared memory (int8 blocks at dyn, {d, Σq} at dyn + K).
template <int kEpi>
__device__ __forceinline__ void matvec_phase(const Args& a, int dtype, const unsigned char* dyn,
                                             float (*part)[kTileRows]) {
  const auto* qs = reinterpret_cast<const int8_t*>(dyn);
  const auto* meta = reinterpret_cast<const int2*>(dyn + a.K);
  unsigned long long best = 0;
  if (dtype == static_cast<int>(DType::Q4_0))
    matvec_tiles<DType::Q4_0, kEpi, true>(a, qs, meta, nullptr, part, best, blockIdx.x, gridDim.x);
  else
    matvec_tiles<DType::Q8_0, kEpi, true>(a, qs, meta, nullptr, part, best, blockIdx.x, gridDim.x);
}

// The int8 activation act (K int8, then K/32 × {d, Σq}) written earlier in this launch, copied
// into shared memory in the same layout.
__device__ __forceinline__ void load_act(const void* act, int K, unsigned char* dyn) {
  const int n8 = (K + K / 32 * 8) / 8;  // K % 32 == 0: a whole number of 8-byte words
  const auto* src = static_cast<const unsigned long long*>(act);
  auto* dst = reinterpret_cast<unsigned long long*>(dyn);
  constexpr int kIn = 8;  // loads in flight per thread: one L2 round trip, not one per word
  for (int i0 = threadIdx.x; i0 < n8; i0 += kThreads * kIn) {
    unsigned long long t[kIn];
#pragma unroll
    for (int u = 0; u < kIn; ++u) t[u] = i0 + u * kThreads < n8 ? __ldcg(src + i0 + u * kThreads) : 0ull;
#pragma unroll
    for (int u = 0; u < kIn; ++u)
      if (i0 + u * kThreads < n8) dst[i0 + u * kThreads] = t[u];
  }
  __syncthreads();
}

// Row `token` of the tiled embedding (any matvec dtype) · scale, elements i0, i0 + step, ...
__device__ __forceinline__ float embed_elem(const StepMatrix& E, int64_t r, int64_t e) {
  const int64_t t = r / kTileRows, rr = r % kTileRows;
  if (E.dtype == static_cast<int>(DType::Q4_0) || E.dtype == static_cast<int>(DType::Q8_0)) {
    const int64_t nc = E.cols / 32, c = e / 32, j = e % 32;
    const size_t slot = static_cast<size_t>((t * nc + c) * kTileRows + rr);
    const float d = f16_bits_to_f32(E.scales[slot]);
    if (E.dtype == static_cast<int>(DType::Q4_0)) {
      const uint8_t b = E.data[slot * 16 + (j % 16)];
      const int q = j < 16 ? (b & 0x0F) : (b >> 4);
      return static_cast<float>(q - 8) * d;
    }
    return static_cast<float>(reinterpret_cast<const int8_t*>(E.data)[slot * 32 + j]) * d;
  }
  const int64_t nc = E.cols / 8, c = e / 8, j = e % 8;
  const size_t slot = static_cast<size_t>((t * nc + c) * kTileRows + rr);
  const uint16_t b = reinterpret_cast<const uint16_t*>(E.data)[slot * 8 + j];
  return E.dtype == static_cast<int>(DType::F16) ? f16_bits_to_f32(b) : __uint_as_float(static_cast<unsigned>(b) << 16);
}

template <int kE, KVElem kT, int kBar>
__global__ void __launch_bounds__(kThreads, 2) step_kernel(StepPlan p) {
  extern __shared__ __align__(16) unsigned char dyn[];
  __shared__ float part[kWarps][kTileRows];
  const StepDynamic d = *p.dyn_dev;
  auto* bar = reinterpret_cast<unsigned long long*>(p.barrier);
  unsigned long long target = d.barrier_base;
  const int64_t H = p.hidden;

  // The embedding row (as embed_kernel), spread over the grid; the LM head's result word cleared.
  if (blockIdx.x == 0 && threadIdx.x == 0 && p.result) *reinterpret_cast<unsigned long long*>(p.result) = 0ull;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; e < H;
       e += static_cast<int64_t>(gridDim.x) * kThreads)
    p.x[e] = embed_elem(p.embed, d.token, e) * p.embed_scale;
  if (p.layers_dev[0].prefetch_next) prefetch_layer(p.layers_dev[0]);
  grid_barrier<kBar>(bar, target);

  if (p.probe == 1) {  // EG_CUDA_STEP_PROBE=barriers: the barriers alone (timing only; no results)
    for (int b = 1; b < kPhasesPerLayer * p.n_layers; ++b) grid_barrier<kBar>(bar, target);
    return;
  }
  for (int li = 0; li < p.n_layers; ++li) {
    const StepLayer& L = p.layers_dev[li];
    const StepKV kv = p.kv_dev[li];
    if (L.prefetch_next && li + 1 < p.n_layers) prefetch_layer(p.layers_dev[li + 1]);

    const bool mv = p.probe != 3, at = p.probe != 2;  // probes 2 / 3 skip attention / the matvecs
    // q|k|v on the input stage (the fused step's in_qkv).
    if (mv) {
      Args a = matrix_args(L.qkv);
      a.in_p = li == 0 ? p.x : p.proj;
      if (li > 0) {
        a.in_r = p.x2;
        a.in_w_post = p.layers_dev[li - 1].post_ffw_norm;
        a.in_r_out = p.x;
      }
      a.in_w_norm = L.input_norm;
      a.in_off = p.w_offset;
      a.in_eps = p.eps;
      a.y = p.qkv;
      build_input<true, true>(a, dyn, &part[0][0]);
      matvec_phase<kStore>(a, L.qkv.dtype, dyn, part);
    }
    grid_barrier<kBar>(bar, target);

    // Attention: items (split, head); the last CTA of a head writes its int8 blocks of o's input.
    if (at) {
      const int hd = L.aa.head_dim;
      const int64_t qdim = static_cast<int64_t>(L.aa.n_heads) * hd;
      auto* act_qs = static_cast<int8_t*>(p.act);
      auto* act_meta = reinterpret_cast<int2*>(act_qs + qdim);
      const int items = L.aa.n_splits * L.aa.n_heads;
      for (int it = blockIdx.x; it < items; it += gridDim.x) {
        attn_fused_item<kE, kT, kWarps, true>(L.qa, L.aa, p.qkv, d.pos, kv.k, kv.v, p.partial, p.counters, nullptr,
                                              act_qs, act_meta, it % L.aa.n_splits, it / L.aa.n_splits);
        __syncthreads();
      }
    }
    grid_barrier<kBar>(bar, target);

    // o.
    if (mv) {
      Args a = matrix_args(L.o);
      a.y = p.proj;
      load_act(p.act, a.K, dyn);
      matvec_phase<kStore>(a, L.o.dtype, dyn, part);
    }
    grid_barrier<kBar>(bar, target);

    // gate|up on the stage (the fused step's in_gu), GELU·up, quantized for down.
    if (mv) {
      Args a = matrix_args(L.gu);
      a.in_p = p.proj;
      a.in_r = p.x;
      a.in_w_post = L.post_attn_norm;
      a.in_r_out = p.x2;
      a.in_w_norm = L.pre_ffw_norm;
      a.in_off = p.w_offset;
      a.in_eps = p.eps;
      const int64_t inter = L.gu.rows / 2;
      a.q_out = static_cast<int8_t*>(p.act);
      a.meta_out = reinterpret_cast<int2*>(static_cast<int8_t*>(p.act) + inter);
      build_input<true, true>(a, dyn, &part[0][0]);
      matvec_phase<kGeluQ>(a, L.gu.dtype, dyn, part);
    }
    grid_barrier<kBar>(bar, target);

    // down.
    if (mv) {
      Args a = matrix_args(L.down);
      a.y = p.proj;
      load_act(p.act, a.K, dyn);
      matvec_phase<kStore>(a, L.down.dtype, dyn, part);
    }
    if (li + 1 < p.n_layers) grid_barrier<kBar>(bar, target);
  }
}

using StepFn = void (*)(StepPlan);

template <int kR>
StepFn pick_t(int head_dim, KVElem kv) {
  const int E = head_dim / 32;
  static const StepFn table[3][3] = {
      {step_kernel<4, KVElem::F16, kR>, step_kernel<4, KVElem::BF16, kR>, step_kernel<4, KVElem::F32, kR>},
      {step_kernel<8, KVElem::F16, kR>, step_kernel<8, KVElem::BF16, kR>, step_kernel<8, KVElem::F32, kR>},
      {step_kernel<16, KVElem::F16, kR>, step_kernel<16, KVElem::BF16, kR>, step_kernel<16, KVElem::F32, kR>}};
  return table[E <= 4 ? 0 : E <= 8 ? 1 : 2][static_cast<int>(kv)];
}

StepFn pick(const StepPlan& p) { return p.barrier_mode == 2 ? pick_t<2>(p.head_dim, p.kv) : pick_t<1>(p.head_dim, p.kv); }

size_t smem_bytes(const StepPlan& p) {
  // The stage: activation + its four input vectors; the loaded activations of o / down.
  const int64_t k = std::max(p.hidden, p.max_act);
  return stage_act_bytes(true, static_cast<int>(k)) + static_cast<size_t>(16 * p.hidden);
}

void check_plan(const StepPlan& p) {
  if (p.n_layers <= 0 || !p.layers_dev || !p.kv_dev || !p.dyn_dev || !p.x || !p.x2 || !p.proj || !p.qkv ||
      !p.partial || !p.act || !p.counters || !p.barrier)
    throw Error("CUDA step_layers: incomplete plan");
  if (p.head_dim <= 0 || p.head_dim > 512 || p.head_dim % 32 != 0)
    throw Error("CUDA step_layers: head_dim " + std::to_string(p.head_dim) + " is not a multiple of 32 up to 512");
  if (p.hidden % 32 != 0 || p.max_act % 32 != 0) throw Error("CUDA step_layers: widths must be multiples of 32");
}

}  // namespace

int step_barriers(int n_layers) { return 1 + kPhasesPerLayer * n_layers - 1; }

int plan_step_matrix(int64_t rows, int64_t cols, DType t, int grid) {
  (void)t;
  const int64_t ntiles = (rows + kTileRows - 1) / kTileRows;
  const int64_t n_chunks = cols / 32;
  for (int wk = kWarps; wk > 1; wk /= 2) {
    const int64_t groups = (ntiles + (kWarps / wk) - 1) / (kWarps / wk);
    if (groups <= grid && n_chunks >= static_cast<int64_t>(wk) * kLanesPerRow) return wk;
  }
  return 1;
}

int step_grid(const Stream& s, const StepPlan& p, int ctas_per_sm) {
  int coop = 0;
  EG_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, s.device()));
  if (!coop) return 0;
  const StepFn k = pick(p);
  const size_t smem = smem_bytes(p);
  detail::ensure_dynamic_smem(k, smem, "persistent step");
  int per_sm = 0;
  EG_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kThreads, smem));
  per_sm = std::min(per_sm, std::max(1, ctas_per_sm));
  return per_sm * s.sm_count();
}

void step_layers(const Stream& s, const StepPlan& p, int grid) {
  check_plan(p);
  if (grid <= 0) throw Error("CUDA step_layers: no grid (step_grid returned 0)");
  const StepFn k = pick(p);
  const size_t smem = smem_bytes(p);
  detail::ensure_dynamic_smem(k, smem, "persistent step");
  StepPlan copy = p;
  void* args[] = {&copy};
  EG_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(k), dim3(static_cast<unsigned>(grid)),
                                            dim3(kThreads), args, smem, detail::stream_of(s.handle())));
}

}  // namespace eg::cuda
