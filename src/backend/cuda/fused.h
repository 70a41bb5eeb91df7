// Fused decode kernels of the CUDA backend (docs/cuda.md, "Fused step"): matvecs whose input
// stage builds the activation itself (residual add + RMSNorm + int8 quantization, in shared
// memory, redundantly in every CTA), the gate|up matvec with GELU-tanh·up in its epilogue, the
// LM head on the same input stage, and one attention kernel that also does the q/k norms, RoPE
// and the K/V write and merges its splits in the last CTA of each head. A Gemma 2/3 layer is
// then 5 kernels: qkv, attention, o, gate|up, down. No CUDA types here.
#pragma once
#include <cstdint>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/decode_kernels.h"

namespace eg::cuda {

/// The activation a fused matvec builds from f32 device vectors of W.cols elements (W.cols % 32 == 0):
///   v = (residual + rmsnorm(src; w_post))·scale   when residual_dev is set (w_post_dev required;
///                                         scale: Gemma 4's layer_scalar, 1 elsewhere), else v = src
///   residual_out_dev ← v                  when set (written by CTA 0; must not alias src or residual)
///   h = rmsnorm(v; w_norm)                when w_norm_dev is set, else h = v
/// rmsnorm(x; w) = x·(1/sqrt(mean(x²) + eps))·(w_offset + w) (ops::rmsnorm), each multiply and add
/// rounded separately. h is then quantized for Q4_0/Q8_0 weights exactly as quantize_act (the CPU's
/// scheme), or used as f32 for F16/BF16. The result equals rmsnorm/residual_norm + quantize_act up
/// to the f32 summation order of Σx² (tests/cuda_fused_test.cpp).
struct MatvecInput {
  const float* src_dev = nullptr;
  const float* residual_dev = nullptr;
  const float* w_post_dev = nullptr;
  float* residual_out_dev = nullptr;
  const float* w_norm_dev = nullptr;
  float w_offset = 1.0f, eps = 1e-6f;
  float scale = 1.0f;  // applied to v only with a residual (×1 is exact: Gemma 2/3 unchanged)
};

/// y_dev[n] = Σ_k W[n,k]·h[k] (as matvec, with h from `in`).
void matvec_fused(const Stream& s, const DeviceWeight& W, const MatvecInput& in, float* y_dev);

/// The host rows of an interleaved gate|up matrix for matvec_gelu_fused: for each q < rows/4, gate
/// rows 4q..4q+3 then up rows 4q..4q+3 (so one tile of 8 holds both halves of 4 outputs). gate and
/// up: `rows` rows of dtype_row_bytes(t, cols) bytes; rows % 4 == 0 (else eg::Error).
std::string interleave_gate_up(const void* gate, const void* up, DType t, int64_t rows, int64_t cols);

/// y_dev[i] = gelu_tanh(gate_i·h)·(up_i·h), i < W.rows/2, for W uploaded from interleave_gate_up
/// (ops::gelu_tanh_mul's roundings).
void matvec_gelu_fused(const Stream& s, const DeviceWeight& W_interleaved, const MatvecInput& in, float* y_dev);

/// y_dev[n] = gelu_tanh(Σ_k W[n,k]·h[k])·mul_dev[n] (gelu_mul_by's roundings on matvec_fused's y):
/// Gemma 4's per-layer-embedding gate, mul_dev being the layer's PLE input row [W.rows].
void matvec_gelu_by_fused(const Stream& s, const DeviceWeight& W, const MatvecInput& in, const float* mul_dev,
                          float* y_dev);

/// lm_head_argmax on the input stage. The result word must be 0 before the kernel runs (e.g.
/// zeroed by embed_row's clear_dev): this launch does not clear it, so it can follow the previous
/// kernel with programmatic launch.
void lm_head_argmax_fused(const Stream& s, const DeviceWeight& W, const MatvecInput& in, float softcap,
                          uint64_t* result_dev, float* logits_dev = nullptr);

/// q/k norms + RoPE + K/V write (as qkv_heads) and attention (as attention_decode) in one kernel:
/// grid (n_splits, n_heads); each CTA normalises and rotates its query head itself; the CTA whose
/// keys include position pos computes the new K/V row (rounded to the KV type) and uses it, and
/// for the first head of each KV group writes it to the cache; the last CTA of a head to finish
/// (a device counter, reset by it) merges the splits and writes out_dev [nh·hd] f32.
/// qkv_dev = [q: nh·hd | k: nkv·hd | v: nkv·hd]; partial_dev: attention_partial_floats(nh, hd,
/// n_splits) floats; counters_dev: n_heads uint32, zero before the first launch (left zero).
/// qa.n_heads/n_kv_heads/head_dim must equal aa's. Gemma 4 (qkv_heads' flags): qa.v_norm (V as
/// rmsnorm without a weight), qa.v_from_k (V from the raw k projection; qkv_dev = [q | k]) and
/// qa.q_only (a KV-shared layer: qkv_dev = [q], nothing written, every key read from the cache,
/// which must already hold position pos: the source layer's).
void attention_fused(const Stream& s, const QKVHeadArgs& qa, const AttentionArgs& aa, const float* qkv_dev,
                     const StepArgs* args_dev, void* k_cache_dev, void* v_cache_dev, float* partial_dev,
                     uint32_t* counters_dev, float* out_dev);

/// attention_fused's result on one thread-block cluster of cluster_ctas (8, or 16: a
/// non-portable cluster size the H100/H200 allow) CTAs per KV head (sm_90,
/// attention_cluster.cu): the CTAs split the keys first..pos evenly; keys and values are staged in shared
/// memory (cp.async, tiles of tile_keys rows, 0 = a default for head_dim and KV type; a multiple
/// of 4 up to 256), the first tiles requested before the programmatic-launch wait (rows < pos
/// were written by earlier steps); the CTAs merge through distributed shared memory (no partial
/// buffer, no counters). Norms, RoPE, the K/V write (bit-identical to qkv_heads) and Gemma 4's
/// flags as attention_fused; aa.n_splits and split_min_keys are not used. Writes out_dev
/// [nh·hd] f32 when set and act_dev (quantize_act's int8 blocks + {d, Σq}, the o matvec's
/// input) when set. Every CTA walks n/8 keys one tile after another, so it is for short
/// contexts; long ones take attention_fused. Needs attention_cluster_supported (else eg::Error):
/// head_dim 32, 64, 96, 128, 256 or 512. heads_per_cta: q heads one cluster serves (dividing
/// the q heads per KV head and 8; each key is then read once per heads_per_cta heads), 1: a
/// cluster per q head, as many CTAs as possible per head.
bool attention_cluster_supported(const QKVHeadArgs& qa, const AttentionArgs& aa);
void attention_cluster(const Stream& s, const QKVHeadArgs& qa, const AttentionArgs& aa, const float* qkv_dev,
                       const StepArgs* args_dev, void* k_cache_dev, void* v_cache_dev, float* out_dev, void* act_dev,
                       int tile_keys = 0, int cluster_ctas = 8, int heads_per_cta = 1);

}  // namespace eg::cuda
