// Internal helpers of the CUDA backend (CUDA types allowed: included by .cu files only).
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "core/error.h"

namespace eg::cuda::detail {

[[noreturn]] inline void fail(cudaError_t e, const char* what, const char* file, int line) {
  throw Error(std::string("CUDA: ") + what + " failed: " + cudaGetErrorString(e) + " (" + file +
              ":" + std::to_string(line) + ")");
}

inline cudaStream_t stream_of(void* h) { return static_cast<cudaStream_t>(h); }

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
