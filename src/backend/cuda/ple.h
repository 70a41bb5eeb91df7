// Gemma 4's per-layer embeddings (PLE, E2B/E4B) on the CUDA backend: gemma-architectures.md
// §3.3.1 (the inputs) and §3.3.2 step 7 (the per-layer gate); transformers modeling_gemma4.py
// (get_per_layer_inputs / project_per_layer_inputs), as model/ple.cpp does it on the CPU.
//
// The token-identity part, E_ple[id]·√P: the table, [V, L·P], stays in host memory as llama.cpp
// keeps it; the host copies each token's row as stored and uploads it, and dequant_rows expands
// the rows here (a chunk of T tokens moves T rows of the stored bytes, not T·L·P floats). The
// context part and the mix run here. The F32 matvec is for per_layer_model_projection, which llama.cpp's quantizer
// and ours keep in f32. No CUDA types here; conventions as cuda_backend.h.
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/prefill.h"

namespace eg::cuda {

/// y_dev[t·ldy + n] = Σ_k W[n,k]·x[t·K + k] for n < N, t < T: W_dev row-major f32 [N, K], x_dev f32
/// [T, K]. One warp per output (fixed summation order). For T = 1 (the decode step); longer
/// chunks take Gemm::run with GemmType::F32.
void matvec_f32(const Stream& s, const float* W_dev, int64_t N, int64_t K, const float* x_dev, int T, float* y_dev,
                int64_t ldy);

/// The PLE inputs of T rows from the context projection: c_dev [T, L·P] holds x0·W_plmpᵀ on entry;
/// per row and layer slice of P values, c ← (rmsnorm(c·proj_scale; w_norm, w_offset 0) + tok)·mix,
/// tok_dev [T, L·P] = E_ple[id]·√P (the host's gather). proj_scale = H^-0.5, mix = 2^-0.5 in
/// Gemma 4. Each multiply and add rounded separately, as blocks::ple_inputs.
void ple_combine(const Stream& s, int T, int L, int64_t P, float* c_dev, const float* tok_dev, const float* w_norm_dev,
                 float proj_scale, float eps, float mix);

/// True for the dtypes dequant_rows takes: Q4_0, Q8_0, Q6_K (n % 256 == 0), F16, BF16, F32.
bool dequant_rows_supports(DType t, int64_t n);

/// out_dev [T, n] f32 ← T rows of n values stored back to back at rows_dev in their GGUF /
/// safetensors layout (row t at t·dtype_row_bytes(t, n)): each value dequantized bit for bit as
/// cpu::to_f32 does it (quant::dequantize_row for the block types), then times `scale` (one f32
/// multiply). eg::Error for a dtype or n that dequant_rows_supports refuses.
void dequant_rows(const Stream& s, DType t, const void* rows_dev, int T, int64_t n, float scale, float* out_dev);

/// out_dev [T, n] 16-bit ← gelu_tanh(gate[t·gate_ld + i])·up[t·up_ld + i] (gelu_mul_rows's roundings):
/// the PLE gate of a chunk, up = the layer's slice of the PLE inputs.
void gelu_mul_rows_by(const Stream& s, int T, int64_t n, const float* gate_dev, int64_t gate_ld, const float* up_dev,
                      int64_t up_ld, GemmType t, void* out_dev);

/// h_dev [T, n] 16-bit ← x_dev [T, n] f32 rounded to nearest even (a GEMM's input without a norm).
void convert_rows(const Stream& s, int T, int64_t n, const float* x_dev, GemmType t, void* h_dev);

}  // namespace eg::cuda
