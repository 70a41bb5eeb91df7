// Shape-agnostic operations of the transformer forward pass (float32 activations).
//
// Layouts are row-major; a "row" is the last (contiguous) axis. Weights may be F32, F16, BF16
// or block-quantized (matmul, embedding rows via cpu::to_f32) and are used in place (e.g. straight from a memory-mapped checkpoint). Every op is
// deterministic: the result of an element does not depend on the thread count or on how many
// rows are processed in one call. Threads: the CPU thread pool (backend/cpu/thread_pool.h), one
// dispatch per op call (matmul_fused: one for several products of the same input).
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "core/dtype.h"

namespace eg::ops {

/// A weight matrix [rows, cols] (PyTorch nn.Linear layout [out_features, in_features]).
struct Weight {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  /// The CPU backend's interleaved copy of the same weight (backend/cpu/packed.h), made at load
  /// (model/cpu_repack.cpp), or nullptr. When set, matmul reads it instead of `data`; results are
  /// bit-identical either way for block-quantized weights, and for F16/BF16 they are the packed
  /// layout's own fma order (packed.h), again independent of T, batching and threads.
  const void* packed = nullptr;
};

/// y[t, n] = sum_k x[t, k] * W[n, k]  (y = x·Wᵀ, as nn.Linear without bias).
/// x: [T, K] f32 with K == W.cols; y: [T, W.rows] f32 (must not alias x).
/// W.dtype may also be any block-quantized weight type (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
/// Q5_K, Q6_K, EG_Q4_G128; rows of dtype_row_bytes): the activations are then quantized to int8
/// once per call (backend/cpu/quant_kernels.h, llama.cpp's scheme) — results are close to, not
/// equal to, the f32 product with the dequantized weights. Throws eg::Error if K is not a
/// multiple of the block size or the type is Q8_K (activation-only). Implemented in matmul.cpp.
void matmul(const float* x, int64_t T, const Weight& W, float* y);

/// Several products of the same input in one thread-pool dispatch (e.g. a layer's q/k/v, or
/// gate and up): y_i = x·W_iᵀ for every {W_i, y_i}, each bit-identical to matmul(x, T, *W_i, y_i).
/// Every W_i must have x's K columns (else eg::Error); outputs must not alias x or each other.
struct MatmulOut {
  const Weight* W;
  float* y;
};
void matmul_fused(const float* x, int64_t T, std::initializer_list<MatmulOut> outs);

/// The MLP's down projection of the GeGLU product: y = (gelu_tanh(gate) ⊙ up)·Wᵀ, bit-identical to
/// gelu_tanh_mul(gate, up, T·K, gate) followed by matmul(gate, T, W, y). gate, up: [T, K], K ==
/// W.cols; gate is scratch (it holds the product afterwards, or is left as it was). For a
/// block-quantized W (and no matmul observer set), each row of the product is formed in a
/// thread's buffer and quantized at once, so the [T, K] f32 product is never written to memory.
void matmul_gelu_mul(float* gate, const float* up, int64_t T, const Weight& W, float* y);

/// Calibration hook (AWQ, src/quant/awq.h): when set, every matmul call first calls
/// observer(W, x, T, user) with its weight and its input activations x [T, W.cols] (f32), from the
/// calling thread, before computing. For calibration only: it is one global, not thread-safe by
/// design (set it while no other thread runs a forward pass); nullptr (the default) turns it off.
/// Implemented in ops/matmul_observer.cpp.
using MatmulObserver = void (*)(const Weight& W, const float* x, int64_t T, void* user);
void set_matmul_observer(MatmulObserver observer, void* user);
/// Calls the observer if one is set (used by matmul).
void notify_matmul_observer(const Weight& W, const float* x, int64_t T);
/// True while an observer is set.
bool matmul_observer_set();

/// RMSNorm over rows of length n: y = x · rsqrt(mean(x²) + eps) · (w_offset + w), all in f32.
/// w: [n] of type wtype, or nullptr for the scale-less form (Gemma 4 v_norm).
/// w_offset = 1 for Gemma 2/3 ("1 + w"), 0 for Gemma 4. y may alias x.
void rmsnorm(const float* x, int64_t rows, int64_t n, const void* w, DType wtype, float w_offset,
             float eps, float* y);

/// Rotary embedding, half-split ("NeoX") pairing: channel i pairs with i + rot_dims/2, for
/// i < rot_dims/2 (channels >= rot_dims are untouched). x: [T, heads, head_dim], in place.
/// inv_freq: [rot_dims/2]; angle = float(pos[t]) * inv_freq[i] (f32, as HF computes it).
void rope(float* x, int64_t T, int64_t heads, int64_t head_dim, int64_t rot_dims,
          const int32_t* pos, const float* inv_freq);

/// inv_freq[i] = 1 / (theta ^ (2i / dim)) / linear_factor in f32, i < dim/2
/// (HF modeling_rope_utils "default" and "linear" rope types).
void rope_inv_freq(float theta, int64_t dim, float linear_factor, float* inv_freq);

/// x[i] = cap · tanh(x[i] / cap) (soft-capping, Gemma 2 attention / final logits).
void softcap(float* x, int64_t n, float cap);

/// Numerically stable softmax of one row, in place.
void softmax(float* x, int64_t n);

/// out[i] = gelu_tanh(gate[i]) · up[i]; gelu_tanh(z) = 0.5 z (1 + tanh(√(2/π)(z + 0.044715 z³)))
/// (PyTorch gelu(approximate="tanh")). out may alias gate or up.
void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out);

/// Causal (optionally sliding-window) grouped-query attention of T new queries against a KV
/// cache that already holds the keys/values of positions 0 .. pos[T-1].
///   q:   [T, n_heads, head_dim]   queries at absolute positions pos[t] (RoPE already applied)
///   k,v: [n_pos, n_kv_heads, head_dim] with row p = position p (f32)
///   out: [T, n_heads, head_dim]
/// Query head h uses kv head h / (n_heads / n_kv_heads). Key p is visible to query position q
/// iff p <= q and (window <= 0 or q - p < window). scores = (q·k)·scale, then
/// softcap (if > 0), softmax in f32, out = Σ p·v.
struct AttentionParams {
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 1.0f;
  float softcap = 0.0f;  // 0 = none
  int64_t window = 0;    // 0 = full causal
  /// Bidirectional (encoder) layers, kv::paged_attention only: a query at pos sees keys
  /// max(0, pos - window/2) .. min(key_end, pos + window/2) (window 0: 0 .. key_end), with key_end
  /// the row's last key (paged_attention's key_end, required then). ops::attention refuses it.
  bool symmetric = false;
};
void attention(const float* q, int64_t T, const int32_t* pos, const float* k, const float* v,
               const AttentionParams& p, float* out);

/// dst[i] += src[i]
void add_inplace(float* dst, const float* src, int64_t n);

}  // namespace eg::ops
