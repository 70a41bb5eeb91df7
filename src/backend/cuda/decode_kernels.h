// The decode-step kernels of one Gemma 2/3 decoder layer at batch 1 (besides the matvecs and
// rmsnorm of cuda_backend.h): embedding lookup, q/k norms + RoPE + K/V write, attention of one
// query over the cached positions, residual + norms, GELU-tanh·mul. No CUDA types here.
//
// The step's position and token id live in device memory (StepArgs), so a captured graph replays
// the same kernels for every position. Device K/V of a layer: contiguous [max_tokens, n_kv_heads,
// head_dim] in the KV type (F16 / BF16 / F32, rounded to nearest even as the host KVCache does).
// Tolerances against the CPU ops: docs/cuda.md and tests/cuda_decode_kernels_test.cpp.
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_backend.h"

namespace eg::cuda {

/// What a step reads from device memory (written before each graph launch).
struct StepArgs {
  int32_t token = 0;  // input id
  int32_t pos = 0;    // its position (n_past)
};

/// Element type of the device K/V (kv/kv_cache.h KVType's F16, BF16, F32; same numbering).
enum class KVElem : int { F16 = 0, BF16 = 1, F32 = 2 };

/// x_dev[0..H) = row args->token of the embedding E (tiled layout; any matvec dtype, dequantized
/// as cpu::to_f32 does) · scale. clear_dev (optional): a uint64 set to 0 (the fused LM head's result word).
void embed_row(const Stream& s, const DeviceWeight& E, const StepArgs* args_dev, float scale, float* x_dev,
               uint64_t* clear_dev = nullptr);

/// Per-head work after the q/k/v matvec. qkv_dev = [q: nh·hd | k: nkv·hd | v: nkv·hd] (f32).
/// q heads: rmsnorm(q_norm_dev) when non-null (w_offset + w, eps), RoPE at args->pos → q_out_dev.
/// k heads: rmsnorm(k_norm_dev) when non-null, RoPE, stored at position pos of k_cache_dev; v
/// heads stored at v_cache_dev, unchanged or (v_norm) as rmsnorm without a weight, x·(1/sqrt(
/// mean(x²) + eps)) (Gemma 4). RoPE: ops::rope (pairs i, i + rope_dims/2 for i < rope_dims/2,
/// angle pos·inv_freq_dev[i]; channels ≥ rope_dims unchanged). Gemma 4 (gemma-architectures.md
/// §3.3.2): v_from_k takes V from the raw k projection (K=V layers; the v slot of qkv_dev is not
/// read); q_only handles the q heads alone (a KV-shared layer, which reads another layer's cache;
/// the caches may be null).
struct QKVHeadArgs {
  int n_heads = 0, n_kv_heads = 0, head_dim = 0, rope_dims = 0;
  const float* q_norm_dev = nullptr;
  const float* k_norm_dev = nullptr;
  float w_offset = 1.0f, eps = 1e-6f;
  const float* inv_freq_dev = nullptr;  // [rope_dims / 2]
  KVElem kv = KVElem::F16;
  bool v_norm = false, v_from_k = false, q_only = false;
};
void qkv_heads(const Stream& s, const QKVHeadArgs& a, const float* qkv_dev, const StepArgs* args_dev,
               float* q_out_dev, void* k_cache_dev, void* v_cache_dev);

/// Attention of one query (q_dev [nh, hd]) at position p = args->pos over the cached positions
/// first..p (first = max(0, p − window + 1) with a window, else 0): GQA (head h reads kv head
/// h / (nh / nkv)), score = (q·k)·scale, soft-capped (softcap > 0: c·tanh(s/c)), softmax, Σ p·v.
/// Split over n_splits CTAs per head (flash-decoding), then one combine kernel that writes out_dev
/// [nh·hd] f32 and, when act_dev is non-null, its quantized form (quantize_act; hd % 32 == 0).
/// partial_dev: attention_partial_floats(nh, hd, n_splits) floats of scratch.
struct AttentionArgs {
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 1.0f, softcap = 0.0f;
  int window = 0;
  int n_splits = 1;
  KVElem kv = KVElem::F16;
  int split_min_keys = 1;  // attention_fused only: at least this many keys per used split (fused.h)
};
int64_t attention_partial_floats(int n_heads, int head_dim, int n_splits);
void attention_decode(const Stream& s, const AttentionArgs& a, const float* q_dev, const void* k_cache_dev,
                      const void* v_cache_dev, const StepArgs* args_dev, float* partial_dev, float* out_dev,
                      void* act_dev);

/// The residual joint of a layer (one CTA): x = (x + rmsnorm(proj; w_post))·scale (scale: Gemma 4's
/// layer_scalar; 1 is exact), then y = rmsnorm(x; w_next), or y = x when w_next_dev is null (+ its
/// quantized form in act_dev when non-null, n % 32 == 0). Norm weights are f32 [n] with the
/// w_offset (1 + w for Gemma 2/3, w for Gemma 4).
void residual_norm(const Stream& s, int64_t n, float* x_dev, const float* proj_dev, const float* w_post_dev,
                   const float* w_next_dev, float w_offset, float eps, float* y_dev, void* act_dev,
                   float scale = 1.0f);

/// out = gelu_tanh(gu[0..n)) · gu[n..2n) (ops::gelu_tanh_mul) into out_dev (f32, may be null) and
/// act_dev (quantized, may be null; n % 32 == 0).
void gelu_mul(const Stream& s, const float* gu_dev, int64_t n, float* out_dev, void* act_dev);
/// The same with the two factors apart: out = gelu_tanh(gate[0..n)) · up[0..n) (Gemma 4's PLE gate).
void gelu_mul_by(const Stream& s, const float* gate_dev, const float* up_dev, int64_t n, float* out_dev, void* act_dev);

}  // namespace eg::cuda

namespace eg::cuda {

/// Stream-ordered copies (cudaMemcpyAsync): host → device returns once `src` may be reused;
/// device → host: the data is there after Stream::sync().
void copy_to_device_async(const Stream& s, void* dst_dev, const void* src, size_t n);
void copy_to_host_async(const Stream& s, void* dst, const void* src_dev, size_t n);

}  // namespace eg::cuda
