// Dot products of block-quantized weight rows with quantized activations (CPU, Highway runtime
// dispatch; x86 AVX2/AVX-512 targets use int8 intrinsics, every other target — NEON, SSE4,
// scalar — the portable integer code). Used by ops::matmul; weights are read in place.
//
// Activations are quantized once per row (llama.cpp's scheme):
//   weights Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, EG_Q4_G128 -> ActQ8 blocks of 32 (f32 scale, int8, Σq)
//   weights Q4_K, Q5_K, Q6_K                         -> Q8_K blocks of 256 (quant/blocks.h)
//
// Arithmetic (the same on every target, so results are bit-identical across targets): per weight
// block the integer dot Σ q_w·q_x is computed exactly in int32, the offsets (−8, −16, −32, mins)
// are applied exactly through Σ q_x, and the float accumulation then runs in a fixed order that
// depends only on K: Q8_0 and Q4_0 (which also have packed layouts, packed.h): one chain
// acc = fma(d_w·d_x, float(isum), acc) over the blocks in order; Q4_1, Q5_0, Q5_1, EG_Q4_G128:
// term_i = (d_w·d_x)·isum [+ (m_w·d_x)·Σq_x] per 32-block, added into acc[i % 4],
// result (acc0 + acc1) + (acc2 + acc3); K-quants: one chain over 256-blocks,
// acc += (d·d_x)·isum − (dmin·d_x)·Σ m_j·bsum_j. So a
// result depends only on the weight row and that token's activations: never on T, on how tokens
// are batched, or on the thread count (ops.h's determinism contract).
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace eg::cpu {

/// Activation block for the 32-element weight types: x[i] ≈ d·qs[i], |qs[i]| ≤ 127, s = Σ qs.
struct ActQ8 {
  float d;
  int32_t s;
  int8_t qs[32];
};
static_assert(sizeof(ActQ8) == 40);

/// True if ops::matmul can use weights of type t through qgemm (all block types except Q8_K).
bool qgemm_supports(DType t);

/// Bytes of one quantized activation row of K elements for weights of type w (K a multiple of
/// the weight block size).
size_t act_row_bytes(DType w, int64_t K);

/// Quantizes one f32 activation row x[0..K) for weights of type w into `out`
/// (act_row_bytes(w, K) bytes): ActQ8 (d = amax/127, q = round-to-nearest-even(x/d)) or Q8_K.
void quantize_act_row(DType w, const float* x, int64_t K, void* out);

/// The scalar definition of the ActQ8 rows above (quantize_act_row vectorizes it bit for bit).
void quantize_act_row_reference(const float* x, int64_t K, ActQ8* out);

/// dot(weight row, activation row): see the arithmetic above. wrow: dtype_row_bytes(w, K) bytes.
float qdot(DType w, const void* wrow, const void* act, int64_t K);

/// y[t·ldy + n] = qdot(W row n, activation row t) for n in [n0, n1), t in [0, T).
/// W: rows of w_row_bytes; acts: T rows of a_row_bytes. Walks tokens in tiles of 16 so each
/// weight row is read from memory once per tile, and (Q8_0..Q5_1, K-quants on x86) unpacks each
/// weight block once for 4 tokens; every y element is still bit-identical to qdot's.
void qgemm(DType w, const void* W, size_t w_row_bytes, int64_t n0, int64_t n1, const void* acts,
           size_t a_row_bytes, int64_t T, int64_t K, float* y, int64_t ldy);

}  // namespace eg::cpu
