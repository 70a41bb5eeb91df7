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

/// outs[j][i] += p[j] * v[i] for j < m, i < n: the product rounded to f32, then the sum (two
/// roundings, exactly the scalar `o += p * v` under -ffp-contract=off), so a result does not
/// depend on the SIMD width or on which rows share the call. Loads `v` once per 4 rows.
void add_scaled_rows(float* const* outs, const float* p, int m, const float* v, size_t n);

/// Converts n elements of type `t` at `src` to f32. Block-quantized types are dequantized
/// (quant::dequantize_row; n must be a multiple of the block size, else eg::Error).
void to_f32(const void* src, DType t, size_t n, float* dst);

/// Name of the SIMD target the dispatcher picked ("AVX2", "AVX3", ...).
const char* simd_target_name();

}  // namespace eg::cpu
