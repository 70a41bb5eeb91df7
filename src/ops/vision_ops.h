// Ops the vision towers need beyond ops.h (float32 activations, row-major; weights/biases may be
// F32, F16 or BF16 and are converted on the fly). Deterministic: a row's result does not depend
// on the thread count or on the other rows. Scalar references: tests/vision_ops_test.cpp.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace eg::ops {

/// LayerNorm over rows of length n (PyTorch nn.LayerNorm, biased variance):
/// y = (x − mean) / sqrt(var + eps) · w + b, statistics in f32 (sum order: left to right).
/// w, b: [n] of dtypes wt / bt (b may be nullptr: no bias). y may alias x.
void layernorm(const float* x, int64_t rows, int64_t n, const void* w, DType wt, const void* b, DType bt,
               float eps, float* y);

/// x[r, i] += b[i] for every row r < rows (b: [n] of dtype bt).
void add_bias(float* x, int64_t rows, int64_t n, const void* b, DType bt);

/// x[i] = gelu_tanh(x[i]) (PyTorch gelu(approximate="tanh")), in place.
void gelu_tanh(float* x, int64_t n);

/// Bidirectional (unmasked) multi-head attention of T tokens among themselves:
///   q, k, v: [T, heads, head_dim]; out: [T, heads, head_dim] (must not alias the inputs).
/// out_h = softmax((q_h·k_hᵀ)·scale) · v_h per head, softmax in f32. Runs on ops::matmul
/// (the scores and the weighted sum are matrix products), so it is as fast as the matmuls.
void attention_bidirectional(const float* q, const float* k, const float* v, int64_t T, int64_t heads,
                             int64_t head_dim, float scale, float* out);

}  // namespace eg::ops
