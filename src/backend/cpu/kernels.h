// CPU kernels (Highway, runtime dispatch to the best SIMD target of the machine: AVX-512, AVX2,
// SSE4, NEON...). Shape-agnostic building blocks used by src/ops.
//
// Determinism: every dot product has one fixed summation order (two vector accumulators over
// alternating vector-sized chunks, then a scalar tail), the same in the 1-row and the 4-row
// variants, so a result never depends on how many tokens are processed together or on the
// number of threads.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace eg::cpu {

/// sum_i x[i] * w[i] for n elements; w has element type `wtype` (F32/F16/BF16, converted exactly
/// to f32), x is f32. Accumulates in f32.
float dot(const float* x, const void* w, DType wtype, size_t n);

/// Four dot products sharing one weight row: out[j] = dot(x[j], w) for j < 4, each bit-identical
/// to dot(x[j], w, wtype, n). Loads and converts `w` once.
void dot4(const float* const x[4], const void* w, DType wtype, size_t n, float out[4]);

/// Attention's q·K for four queries over nk consecutive f32 rows (row stride D):
/// out[j][k] = dot(x[j], rows + k·D, F32, D) · scale for j < 4, k < nk, each dot bit-identical to
/// dot() (so to dot4()); two rows per pass share the loads of the queries.
void dot4_rows(const float* const x[4], const float* rows, size_t D, int64_t nk, float scale, float* const out[4]);

/// Attention's p·V for m queries over the same nk keys: for j < m, d < D,
///   outs[j][d] = outs[j][d] + ps[j][0]·V[0][d], then + ps[j][1]·V[1][d], ... in key order,
/// each product rounded to f32 before its sum (exactly the scalar `o += p * v` under
/// -ffp-contract=off), so a result depends neither on the SIMD width nor on m nor on how the
/// keys are split into calls. V holds nk rows of D floats (row stride D); ps[j] points at query
/// j's nk weights. The accumulators stay in registers over all keys of the call.
void accumulate_pv(float* const* outs, const float* const* ps, int m, const float* V, int64_t nk, size_t D);

/// Converts n elements of type `t` at `src` to f32. Block-quantized types are dequantized
/// (quant::dequantize_row; n must be a multiple of the block size, else eg::Error).
void to_f32(const void* src, DType t, size_t n, float* dst);

/// Name of the SIMD target the dispatcher picked ("AVX2", "AVX3", ...).
const char* simd_target_name();

}  // namespace eg::cpu
