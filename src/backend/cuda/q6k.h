// Q6_K weights on the CUDA backend, for the embedding / LM head that llama.cpp's quantizer and
// ours write as Q6_K when the hidden size is a multiple of 256 (gemma-4-e2b's 1536, gemma-2-2b's
// 2304, the tiny models' 256): kept in the GGUF block layout (quant/blocks.h BlockQ6_K: 210 bytes
// per 256 values, x = d·sc_j·(q − 32)), not tiled. No CUDA types here.
//
// upload_weight takes Q6_K into this layout; embed_row / embed_rows gather its rows (dequantized
// bit for bit as quant::dequantize_q6_k: (d·sc)·q in f32); matvec / lm_head_argmax take it with the
// f32 activation x (not int8 blocks): y = Σ_k w_k·x_k in f32, one warp per row in a fixed order, so
// it differs from the CPU's Q6_K matmul (which quantizes x) by that quantization only.
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_backend.h"

namespace eg::cuda {

/// The device copy of a Q6_K weight [rows, cols] (cols % 256 == 0, else eg::Error).
DeviceWeight upload_q6k(const void* src, int64_t rows, int64_t cols);

/// y = W·x for a Q6_K W (x_dev f32 [W.cols]); with result_dev, the LM head's soft-cap (softcap > 0)
/// and argmax word as lm_head_argmax (which must be 0 before the launch); y_dev may then be null.
void matvec_q6k(const Stream& s, const DeviceWeight& W, const float* x_dev, float* y_dev, float softcap,
                uint64_t* result_dev);

}  // namespace eg::cuda
