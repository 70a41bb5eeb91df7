// The chunk-prefill kernels of the CUDA backend (docs/cuda.md, "GEMM prefill"): for a chunk of T
// tokens a Gemma 2/3 layer runs as tensor-core GEMMs (cuBLAS, 16-bit inputs, f32 accumulate and
// output) on [T, K] activation rows, plus row kernels (embedding rows, RMSNorm, residual joint,
// q/k norms + RoPE + K/V write, GELU-tanh·up) and a tiled causal attention of the chunk's queries
// against the device KV cache. No CUDA types here.
//
// Conventions as cuda_backend.h (device pointers *_dev, stream-ordered, eg::Error). Matrices are
// row-major; "16-bit" buffers hold BF16 or F16 (GemmType) values, rounded to nearest even from
// f32. The K/V cache layout, RoPE and norm formulas are decode_kernels.h's.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/decode_kernels.h"

namespace eg::cuda {

/// Input type of the prefill GEMMs (weights and activations): BF16 (default; f32's range) or F16
/// (3 more mantissa bits; activations beyond ±65504 become ±inf). F32: f32 weights and inputs
/// (Gemm::run only: Gemma 4's f32 per_layer_model_projection; the 16-bit conversions do not take it).
enum class GemmType : int { BF16 = 0, F16 = 1, F32 = 2 };

/// Bytes of W dequantized to 16-bit: rows · cols · 2.
size_t dequant_bytes(const DeviceWeight& W);

/// out_dev [W.rows, W.cols] row-major ← W (tiled layout, Q4_0 / Q8_0 / F16 / BF16) dequantized as
/// cpu::to_f32 (d·q in f32), then rounded to `t`. Throws for an unsupported dtype.
void dequant_weight(const Stream& s, const DeviceWeight& W, GemmType t, void* out_dev);

/// A cuBLAS handle bound to one stream (cublasGemmEx, CUBLAS_COMPUTE_32F, tensor cores). Move-only.
class Gemm {
 public:
  explicit Gemm(const Stream& s);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;
  /// y_dev[t·ldy + n] = Σ_k x[t, k]·w[n, k] for t < T, n < N: w_dev 16-bit [N, K], x_dev 16-bit
  /// [T, K] (both row-major, type t), y f32 with row stride ldy ≥ N (so several GEMMs can fill
  /// column ranges of one output). K and N > 0, T > 0.
  void run(GemmType t, const void* w_dev, int64_t N, int64_t K, const void* x_dev, int64_t T, float* y_dev,
           int64_t ldy) const;

 private:
  void* handle_ = nullptr;
};

/// Sets n bytes at ptr_dev to 0 (stream-ordered).
void zero_async(const Stream& s, void* ptr_dev, size_t n);

/// x_dev [T, E.cols] f32: row t = embedding row tokens_dev[t] (dequantized as embed_row) · scale.
void embed_rows(const Stream& s, const DeviceWeight& E, const int32_t* tokens_dev, int T, float scale, float* x_dev);

/// h_dev [T, n] 16-bit ← rmsnorm(x row; w) = (x·inv)·(w_offset + w), inv = 1/sqrt(mean(x²) + eps).
void norm_rows(const Stream& s, int T, int64_t n, const float* x_dev, const float* w_dev, float w_offset, float eps,
               GemmType t, void* h_dev);

/// Per row (residual_norm's formula): x = (x + rmsnorm(proj; w_post))·scale, h = rmsnorm(x; w_next)
/// (16-bit), or h = x when w_next_dev is null.
void residual_norm_rows(const Stream& s, int T, int64_t n, float* x_dev, const float* proj_dev,
                        const float* w_post_dev, const float* w_next_dev, float w_offset, float eps, GemmType t,
                        void* h_dev, float scale = 1.0f);

/// Layout of a gate|up GEMM output row of 2n values: Stacked = gate[0..n) then up[0..n);
/// Interleaved = interleave_gate_up's rows (groups of 4 gate then 4 up).
enum class GateUpLayout : int { Stacked = 0, Interleaved = 1 };
/// out_dev [T, n] 16-bit ← gelu_tanh(gate)·up (gelu_mul's roundings) of gu_dev [T, 2n] f32.
void gelu_mul_rows(const Stream& s, int T, int64_t n, const float* gu_dev, GateUpLayout layout, GemmType t,
                   void* out_dev);

/// qkv_heads for T rows at positions pos0..pos0+T−1: qkv_dev [T, (nh + 2·nkv)·hd] f32 (the GEMM
/// output), q_out_dev [T, nh·hd] f32 (normed, rotated), K/V rows pos0+t of the caches written
/// (a.v_norm, v_from_k and q_only as qkv_heads; the row stride stays (nh + 2·nkv)·hd).
void qk_rope_kv_rows(const Stream& s, const QKVHeadArgs& a, int T, int pos0, const float* qkv_dev, float* q_out_dev,
                     void* k_cache_dev, void* v_cache_dev);

/// Causal attention of T queries at positions pos0..pos0+T−1 (q_dev [T, nh·hd] f32) over the
/// cached keys (which must already hold positions ≤ pos0+T−1): query p sees keys
/// max(0, p − window + 1)..p (window 0: from 0), GQA, score = (q·k)·scale, soft-capped when
/// softcap > 0, softmax, Σ p·v. Tiles of 32 keys in shared memory, online softmax (a.n_splits
/// is ignored). out_dev [T, nh·hd] 16-bit of type t (the input of the o GEMM).
/// scratch_dev (optional, scratch_bytes ≥ attention_prefill_scratch_bytes(a, T), else unused)
/// lets the kernel split the chunk's keys over up to 4 CTAs per query tile and merge their
/// partial softmax sums (attention_prefill_splits says how many it will use); the result equals
/// the unsplit one up to f32 rounding.
/// key_end_dev (optional, int32 [T] device): row t sees keys up to max(key_end[t], pos0 + t)
/// instead of pos0 + t (a bidirectional image span: its rows see the span's last position, as
/// kv::paged_attention's key_end; the window's first key still follows the row's own position);
/// key_end[t] ≤ pos0 + T − 1. With it the keys are never split (scratch unused).
void attention_prefill(const Stream& s, const AttentionArgs& a, int T, int pos0, const float* q_dev,
                       const void* k_cache_dev, const void* v_cache_dev, GemmType t, void* out_dev,
                       void* scratch_dev = nullptr, size_t scratch_bytes = 0, const int32_t* key_end_dev = nullptr);
/// Bytes of the split scratch for T queries: 4 · T · nh · (hd + 2) · 4.
size_t attention_prefill_scratch_bytes(const AttentionArgs& a, int T);
/// The number of key spans attention_prefill uses with scratch_bytes of scratch (1: unsplit):
/// 1 without enough scratch or when ceil(T/32)·nh ≥ 4 CTAs per multiprocessor, else
/// clamp(ceil(keys/128), 1, 4) for the chunk's key range.
int attention_prefill_splits(const Stream& s, const AttentionArgs& a, int T, int pos0, size_t scratch_bytes);

}  // namespace eg::cuda
