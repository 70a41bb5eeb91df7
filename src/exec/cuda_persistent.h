// The CUDA executor's persistent decode step (EG_CUDA_STEP=persistent; backend/cuda/step_kernel.h,
// docs/cuda.md "Persistent step"): per workspace, the device tables of the launch (layers, K/V
// buffers, the step's token/position/barrier base), the barrier counter and the attention scratch.
// Internal to edgegemma_cuda; no CUDA types.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/step_kernel.h"

namespace eg {

/// What does not change between steps (built once by the executor): the layers (qa.kv / aa.kv
/// are set per KV cache type), the embedding, the widths, the grid and the attention splits.
struct PersistentShape {
  std::vector<cuda::StepLayer> layers;
  cuda::StepMatrix embed;
  float embed_scale = 1.0f;
  int64_t hidden = 0, max_act = 0;
  float w_offset = 1.0f, eps = 1e-6f;
  int head_dim = 0, n_heads = 0;
  int grid = 0, n_splits = 1;
  int probe = 0;  // EG_CUDA_STEP_PROBE=barriers (timing only)
  int barrier_mode = 1;  // EG_CUDA_STEP_BARRIER=counter (1, default) | flag (2)
};

/// The buffers a step reads and writes (the workspace's; see cuda::StepPlan).
struct PersistentBuffers {
  float *x = nullptr, *x2 = nullptr, *proj = nullptr, *qkv = nullptr;
  void* act = nullptr;
  uint32_t* counters = nullptr;
  uint64_t* result = nullptr;
};

class PersistentStep {
 public:
  /// Enqueues every layer of `token` at `pos` on s (one cooperative launch). k/v: the cache's
  /// per-layer device buffers; kv_serial identifies the cache (its table is re-uploaded when it
  /// changes). Leaves proj and x2 for the LM head as the fused step does.
  void enqueue(const cuda::Stream& s, const PersistentShape& sh, const PersistentBuffers& b, int32_t token, int pos,
               const std::vector<cuda::DeviceBuffer>& k, const std::vector<cuda::DeviceBuffer>& v, uint64_t kv_serial,
               cuda::KVElem elem);

 private:
  cuda::DeviceBuffer layers_, kv_, dyn_, barrier_, partial_;
  bool layers_built_ = false;
  cuda::KVElem layers_elem_ = cuda::KVElem::F16;
  uint64_t kv_serial_ = 0;
  uint64_t count_ = 0;  // the barrier counter's value after the launches enqueued so far
};

}  // namespace eg
