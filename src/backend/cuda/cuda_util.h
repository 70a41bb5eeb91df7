// Internal helpers of the CUDA backend (CUDA types allowed: included by .cu files only).
#pragma once
#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "core/error.h"

namespace eg::cuda::detail {

[[noreturn]] inline void fail(cudaError_t e, const char* what, const char* file, int line) {
  throw Error(std::string("CUDA: ") + what + " failed: " + cudaGetErrorString(e) + " (" + file +
              ":" + std::to_string(line) + ")");
}

inline cudaStream_t stream_of(void* h) { return static_cast<cudaStream_t>(h); }

// Programmatic dependent launch (PDL, sm_90 + CUDA 12): a kernel launched with it may start while
// the previous kernel on the stream drains. Every kernel of this backend calls pdl_trigger() and
// pdl_wait() before it reads anything an earlier kernel wrote (and before it writes anything),
// so enabling it is safe; both are no-ops without a programmatic dependency or below sm_90.
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Quantizes the 32 values v held by the lanes of one warp (lane i: element i of block b) into
// int8 block b of qs and its {d, Σq} into meta[b]: cpu::quantize_act_row's scheme, bit for bit
// (d = amax/127 and 1/d IEEE-rounded, q = rint(x·(1/d)) clamped to ±127).
__device__ __forceinline__ void quantize_block_warp(float v, int lane, int64_t b, int8_t* qs, int2* meta) {
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  int q = static_cast<int>(rintf(v * id));
  q = q < -127 ? -127 : (q > 127 ? 127 : q);
  qs[b * 32 + lane] = static_cast<int8_t>(q);
  int sum = q;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
  if (lane == 0) meta[b] = make_int2(__float_as_int(d), sum);
}

/// Lets kernel `k` launch with `dynamic_bytes` of dynamic shared memory on the current device.
/// The default limit (48 KiB) covers static + dynamic shared memory together, so a kernel with
/// static arrays fails with "invalid argument" at exactly 48 KiB of dynamic memory: this raises
/// cudaFuncAttributeMaxDynamicSharedMemorySize whenever static + dynamic passes 48 KiB, only ever
/// upwards (launches captured into a graph earlier keep their room). Throws Error naming `what`
/// and the sizes when static + dynamic passes the device's opt-in limit (227 KiB on sm_90).
/// Thread-safe; one attribute query per kernel and device.
void ensure_dynamic_smem(const void* k, size_t dynamic_bytes, const char* what);
template <class... P>
void ensure_dynamic_smem(void (*k)(P...), size_t dynamic_bytes, const char* what) {
  ensure_dynamic_smem(reinterpret_cast<const void*>(k), dynamic_bytes, what);
}

/// Launches kernel k<<<grid, block, smem, st>>>(args...), with PDL when `pdl` (CUDA 12+ only).
template <class... P, class... A>
void launch_kernel_smem(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, bool pdl, A&&... args) {
#if CUDART_VERSION >= 12000
  if (pdl) {
    cudaLaunchConfig_t lc = {};
    lc.gridDim = grid;
    lc.blockDim = block;
    lc.dynamicSmemBytes = smem;
    lc.stream = st;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    lc.attrs = at;
    lc.numAttrs = 1;
    const cudaError_t e = cudaLaunchKernelEx(&lc, k, std::forward<A>(args)...);
    if (e != cudaSuccess) fail(e, "cudaLaunchKernelEx", __FILE__, __LINE__);
    return;
  }
#endif
  (void)pdl;
  k<<<grid, block, smem, st>>>(std::forward<A>(args)...);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail(e, "kernel launch", __FILE__, __LINE__);
}

/// Launches kernel k<<<grid, block, 0, st>>>(args...), with PDL when `pdl` (CUDA 12+ only).
template <class... P, class... A>
void launch_kernel(void (*k)(P...), dim3 grid, dim3 block, cudaStream_t st, bool pdl, A&&... args) {
  launch_kernel_smem(k, grid, block, 0, st, pdl, std::forward<A>(args)...);
}

/// The process-wide PDL switch (cuda_backend.h: set_programmatic_launch).
bool pdl_enabled();

}  // namespace eg::cuda::detail

#define EG_CUDA_CHECK(call)                                                        \
  do {                                                                             \
    const cudaError_t eg_cuda_err_ = (call);                                       \
    if (eg_cuda_err_ != cudaSuccess) {                                             \
      ::eg::cuda::detail::fail(eg_cuda_err_, #call, __FILE__, __LINE__);           \
    }                                                                              \
  } while (0)

/// After a kernel launch: reports a bad launch configuration at once (asynchronous faults are
/// reported by the next synchronising call).
#define EG_CUDA_CHECK_LAUNCH() EG_CUDA_CHECK(cudaGetLastError())
