// Quantization and dequantization of rows of block-quantized types (layouts: quant/blocks.h).
//
// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 are quantized with exactly llama.cpp's reference rules
// (ggml-quants.c quantize_row_*_ref), so the bytes equal llama-quantize's output for the same f32
// input (checked in tests/quant_formats_test.cpp against real GGUF files). Q4_K / Q5_K / Q6_K
// dequantize bit-exactly as ggml's layout says; their quantizers search for error-minimising
// scales (the idea of ggml's make_qkx2_quants / make_qx_quants, our own code) — bytes may differ
// from llama.cpp. Q8_K is the activation-side type of the K-quant dot products. EG_Q4_G128 is
// edgegemma's 4-bit asymmetric type with group size 128.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "quant/blocks.h"

namespace eg::quant {

/// Quantizes n f32 values x[0..n) of one row into `out` (dtype_row_bytes(t, n) bytes).
/// t: any block type (Q8_0 ... EG_Q4_G128). Throws eg::Error if t is not a block type or n is not
/// a multiple of dtype_block_elems(t). Non-finite inputs give unspecified (but memory-safe) bytes.
void quantize_row(DType t, const float* x, int64_t n, void* out);

/// Dequantizes n elements of one row of type t at `in` into out[0..n) (f32). Also accepts
/// F32/F16/BF16 (plain conversion). Throws eg::Error for a bad n (not a block multiple).
void dequantize_row(DType t, const void* in, int64_t n, float* out);

// Per-family implementations (n already checked to be a multiple of the block size).
void quantize_q8_0(const float* x, int64_t n, BlockQ8_0* y);
void quantize_q4_0(const float* x, int64_t n, BlockQ4_0* y);
void quantize_q4_1(const float* x, int64_t n, BlockQ4_1* y);
void quantize_q5_0(const float* x, int64_t n, BlockQ5_0* y);
void quantize_q5_1(const float* x, int64_t n, BlockQ5_1* y);
void dequantize_q8_0(const BlockQ8_0* x, int64_t n, float* y);
void dequantize_q4_0(const BlockQ4_0* x, int64_t n, float* y);
void dequantize_q4_1(const BlockQ4_1* x, int64_t n, float* y);
void dequantize_q5_0(const BlockQ5_0* x, int64_t n, float* y);
void dequantize_q5_1(const BlockQ5_1* x, int64_t n, float* y);

void quantize_q4_k(const float* x, int64_t n, BlockQ4_K* y);
void quantize_q5_k(const float* x, int64_t n, BlockQ5_K* y);
void quantize_q6_k(const float* x, int64_t n, BlockQ6_K* y);
void quantize_q8_k(const float* x, int64_t n, BlockQ8_K* y);
void dequantize_q4_k(const BlockQ4_K* x, int64_t n, float* y);
void dequantize_q5_k(const BlockQ5_K* x, int64_t n, float* y);
void dequantize_q6_k(const BlockQ6_K* x, int64_t n, float* y);
void dequantize_q8_k(const BlockQ8_K* x, int64_t n, float* y);

void quantize_eg_q4_g128(const float* x, int64_t n, BlockEGQ4G128* y);
void dequantize_eg_q4_g128(const BlockEGQ4G128* x, int64_t n, float* y);

}  // namespace eg::quant
