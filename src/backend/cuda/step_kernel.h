// The persistent decode step (docs/cuda.md, "Persistent step"): every layer of a Gemma 2/3 dense
// decoder for one token in ONE cooperative kernel launch, its phases separated by grid-wide
// barriers instead of kernel boundaries. Per layer: [input stage (residual + post-FFW norm of the
// previous layer, input norm, int8 quantization; redundantly in every CTA) + q|k|v matvec] |
// [fused attention items (q/k norm, RoPE, K/V write, flash-decoding splits, last-CTA merge that
// writes o's int8 input)] | [o matvec] | [stage (residual + post-attention norm, pre-FFW norm) +
// gate|up matvec with GELU·up, each CTA quantizing its 32 outputs] | [down matvec], "|" being a
// barrier. While a layer runs, each CTA prefetches its share of the next layer's weights into L2.
// The LM head stays a separate launch (lm_head_argmax_fused) on the residual / proj it leaves.
//
// The numerics are the fused step's (fused.h): the same stage, quantization and epilogue code;
// only the matvecs' K-split (warps per tile) and the attention's split count, hence the f32
// summation order, can differ. No CUDA types here.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/decode_kernels.h"

namespace eg::cuda {

/// A matrix in the tiled layout (DeviceWeight's data/scales), Q4_0 or Q8_0, and the warps that
/// share one tile (1, 2, 4, 8; chosen by plan_step_matrix).
struct StepMatrix {
  const uint8_t* data = nullptr;
  const uint16_t* scales = nullptr;
  int64_t rows = 0, cols = 0;
  int dtype = 0;  // static_cast<int>(DType)
  int wk = 1;
};

/// One decoder layer (device pointers; the table lives in device memory).
struct StepLayer {
  StepMatrix qkv;   // [q | k | v] stacked, cols = hidden
  StepMatrix o;     // cols = n_heads · head_dim
  StepMatrix gu;    // gate|up interleaved (interleave_gate_up), rows = 2 · intermediate, wk = 1
  StepMatrix down;  // cols = intermediate
  const float* input_norm = nullptr;
  const float* post_attn_norm = nullptr;
  const float* pre_ffw_norm = nullptr;
  const float* post_ffw_norm = nullptr;
  QKVHeadArgs qa;
  AttentionArgs aa;  // aa.n_splits = the step's splits; aa.split_min_keys as the fused step
  int prefetch_next = 0;  // prefetch the next layer's weights into L2 while this one runs (layer 0's
                          // flag: layer 0's own, at the start)
};

/// Written before every launch (device memory): the token, its position, the barrier counter's
/// value before this launch, and per layer the K and V cache buffers.
struct StepDynamic {
  int32_t token = 0, pos = 0;
  uint64_t barrier_base = 0;
};
struct StepKV {
  void* k = nullptr;
  void* v = nullptr;
};

/// Everything the launch needs (host struct, device pointers inside). Buffers (f32 unless said):
/// x, x2 [H] the residual ping-pong (as the fused step: x after the attention joint of a layer,
/// x2 after the FFW joint; x holds the embedding at the start), proj [H] (o / down output),
/// qkv [max q|k|v], act (int8 + {d, Σq} blocks, act_q8_bytes(max(q dim, intermediate))),
/// partial (attention_partial_floats(n_heads, max head_dim, n_splits)), counters [n_heads]
/// uint32 (zero; left zero), barrier (256 bytes, zero at first: the uint64 counter at [0] and
/// flag at [16], never reset: StepDynamic::barrier_base), result
/// (the LM head's word, cleared here).
struct StepPlan {
  int n_layers = 0;
  const StepLayer* layers_dev = nullptr;
  const StepKV* kv_dev = nullptr;
  const StepDynamic* dyn_dev = nullptr;
  StepMatrix embed;  // any matvec dtype (row lookup only)
  float embed_scale = 1.0f;
  int64_t hidden = 0;
  int64_t max_act = 0;  // max(q dim, intermediate)
  float w_offset = 1.0f, eps = 1e-6f;
  int head_dim = 0;     // the same for every layer (Gemma 2/3)
  KVElem kv = KVElem::F16;
  float *x = nullptr, *x2 = nullptr, *proj = nullptr, *qkv = nullptr, *partial = nullptr;
  void* act = nullptr;
  uint32_t* counters = nullptr;
  uint64_t* barrier = nullptr;
  uint64_t* result = nullptr;
  int barrier_mode = 1;  // grid barrier: 1 release add + poll the counter, 2 acq_rel add + poll a flag line
  int probe = 0;  // tuning only (garbage results): 1 barriers alone, 2 no attention, 3 no matvecs
};

/// Grid barriers per launch for n_layers (what barrier_base advances by, times the grid).
int step_barriers(int n_layers);

/// CTAs of the cooperative launch on this device for the plan's shapes (ctas_per_sm wanted, at
/// most what fits together on every multiprocessor), or 0 when it cannot run (no cooperative
/// launch, or not even one CTA per multiprocessor fits).
int step_grid(const Stream& s, const StepPlan& p, int ctas_per_sm);

/// Warps per tile for a matrix in a grid of `grid` CTAs of 8 warps: the largest of 8, 4, 2, 1
/// whose tile groups all fit in one pass of the grid and leave every lane a chunk; 1 if none.
int plan_step_matrix(int64_t rows, int64_t cols, DType t, int grid);

/// Enqueues the launch (cudaLaunchCooperativeKernel) on s. grid from step_grid. Throws eg::Error
/// for unsupported shapes (matrix dtypes other than Q4_0/Q8_0, head_dim not a multiple of 32 up to
/// 512, widths not multiples of 32).
void step_layers(const Stream& s, const StepPlan& p, int grid);

}  // namespace eg::cuda
