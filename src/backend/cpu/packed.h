// Interleaved ("packed") weight layouts for the CPU matmul kernels, chosen at load.
//
// A block-quantized weight [rows, K] is stored by llama.cpp/GGUF row after row: each row is K/32
// blocks of (f16 scale, 32 codes). A kernel that multiplies 16 rows at once by one activation
// wants, for every 32-block column b, the 16 rows' scales side by side and their codes
// interleaved so that one 64-byte load feeds 4 codes of each of the 16 rows to one `vpdpbusd`
// (u8 × s8 → int32, 16 lanes = 16 rows), with no horizontal reduction. The packed copy holds the
// same bits in that order (and the same number of bytes), so it replaces the mapped rows: after
// packing, the original pages are released (model/cpu_repack.cpp) and never read again by
// matmul.
//
// Layouts (rows must be a multiple of 16; group g = rows 16g .. 16g+15):
//   Q4_0x16: per group, per block b: 16 × f16 scales d[r] (32 bytes), then 4 chunks of 64 bytes;
//            chunk j holds, for row r, 4 bytes at 4r..4r+3: byte i = q(r, 4j+i) | q(r, 16+4j+i) << 4
//            (q = the 4-bit code 0..15, weight = d·(q − 8)). 288 bytes = 16 × sizeof(BlockQ4_0).
//   Q8_0x16: per group, per block b: 16 × f16 scales (32 bytes), then 8 chunks of 64 bytes;
//            chunk j holds, for row r, bytes 4r..4r+3 = q(r, 4j+i) + 128 (as u8; q the int8 code).
//            544 bytes = 16 × sizeof(BlockQ8_0).
//   Q6_Kx16: per group, per 256-block b: 3360 bytes = 16 × sizeof(BlockQ6_K): 16 f16 d, the 16
//            rows' 16 sub-block scales, then the 6-bit codes as 32 low-nibble and 16 high-bit
//            vectors of 64 bytes, 4 elements of each row per vector (packed_q6k.cpp has the bytes).
//            Needs cols % 256 == 0.
//   F16x16 / BF16x16 / F32x16: per group, per column k: the 16 rows' values (32 bytes; F32: 64
//            bytes), k = 0 .. K-1.
// Group g starts at byte g · (K/32) · (bytes per block column) (Q6_K: g · (K/256) · 3360; float
// layouts: g · K · 16 · element bytes).
//
// Arithmetic (identical to the row kernels in quant_kernels.cpp, so a packed and an unpacked
// weight give bit-identical results): per block, the exact int32 sum Σ q_w·q_x (with the −8·Σq_x
// or −128·Σq_x offset applied in integers), then acc = fma(d_w·d_x, float(isum), acc) over the
// blocks in order, starting from 0. Q6_K: per 256-block the exact integer
// Σ_s scale_s·(Σ q_w·q_x − 32·bsum_s) over the 16 sub-blocks, then acc = acc + (d_w·d_x)·float(is)
// (separately rounded product and sum, as the Q6_K row kernel).
// Float layouts (F16x16, BF16x16, F32x16) multiply the f32 activations by the exactly converted weights
// with one fma chain per output over k = 0 .. K-1 in order (acc = fma(w_k, x_k, acc) from 0); this
// differs in rounding from the unpacked dot (kernels.h, two vector accumulators), so a float
// weight's results are the same for every T, batching and thread count, packed or not, but a
// packed and an unpacked copy of it are not bit-identical (both are f32 dot products).
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cpu/quant_kernels.h"
#include "core/dtype.h"

namespace eg::cpu {

constexpr int64_t kPackRows = 16;  // rows per interleaved group

/// Bytes of one block column of a 16-row group: 16 Q4_0 blocks (18 B each) or 16 Q8_0 blocks (34 B).
template <bool kQ4>
constexpr size_t kPackColBytes = static_cast<size_t>(kPackRows) * (kQ4 ? 18 : 34);

/// True when weights of type t have a packed layout and this machine has its kernel
/// (block types: AVX-512 VNNI; float types: AVX-512F; EDGEGEMMA_REPACK=0 in the environment
/// turns packing off).
bool packed_available(DType t);

/// True when Model::repack_for_cpu packs weights of type t: packed_available(t), and for Q6_K
/// unless EDGEGEMMA_REPACK_Q6K=0 (its kernel is exact; no faster than the row kernel on a Zen 4
/// VM, +16% E2B decode on Zen 5: docs/performance.md, 2026-12-02 and 2026-12-07).
bool packed_by_default(DType t);

/// True when a [rows, cols] weight of type t can be packed (rows % 16 == 0, cols % 32 == 0,
/// a type with a layout above); does not look at the machine.
bool packable(DType t, int64_t rows, int64_t cols);

/// Bytes of the packed copy (equal to the unpacked size).
size_t packed_bytes(DType t, int64_t rows, int64_t cols);

/// Packs groups [g0, g1) of the row-major weight `src` (rows of dtype_row_bytes(t, cols)) into
/// `dst` (packed_bytes(t, rows, cols) bytes, the whole packed tensor). Throws eg::Error if the
/// weight is not packable.
void pack_groups(DType t, const void* src, int64_t rows, int64_t cols, int64_t g0, int64_t g1, void* dst);

/// The inverse, for one row: writes row n of the packed weight in the original block layout
/// (dtype_row_bytes(t, cols) bytes). Used by tests and for row lookups.
void unpack_row(DType t, const void* packed, int64_t rows, int64_t cols, int64_t n, void* out_row);

/// y[t·ldy + n] = dot(row n, activation row t) for n in [n0, n1) (multiples of 16), t in [0, T).
/// acts: T rows of ActQ8 (a_row_bytes apart, K/32 blocks each; Q6_K: Q8_K rows of K/256 blocks,
/// i.e. quantize_act_row's rows for t). Bit-identical to qgemm on the unpacked weight. Only call
/// when packed_available(t).
void packed_gemm(DType t, const void* packed, int64_t K, int64_t n0, int64_t n1, const void* acts,
                 size_t a_row_bytes, int64_t T, float* y, int64_t ldy);

/// F16/BF16/F32 packed weights: y[t·ldy + n] = Σ_k w[n,k]·x[t·K + k] (f32 x [T, K]) for n in [n0, n1)
/// (multiples of 16), in the fma order above. Only call when packed_available(t).
void packed_gemm_float(DType t, const void* packed, int64_t K, int64_t n0, int64_t n1, const float* x,
                       int64_t T, float* y, int64_t ldy);

/// The scalar reference of packed_gemm_float.
void packed_gemm_float_reference(DType t, const void* packed, int64_t K, int64_t n0, int64_t n1,
                                 const float* x, int64_t T, float* y, int64_t ldy);

/// True when this CPU and OS can run the AMX-INT8 prefill kernel (packed_amx.cpp: AMX-TILE and
/// AMX-INT8, and Linux granted the process the tile state).
bool packed_amx_supported();

/// True when packed_gemm uses that kernel for its full 16-token tiles: packed_amx_supported() and
/// EDGEGEMMA_AMX=1 in the environment (opt-in: exact, measured no faster than AVX-512 VNNI yet).
bool packed_amx_enabled();

/// The AMX-INT8 kernel for Q4_0 / Q8_0: computes the first T/16·16 tokens exactly as packed_gemm
/// does (bit-identical) and returns how many it did (0 when T < 16, for other types, or without
/// packed_amx_supported()); the caller runs the remaining tokens.
int64_t packed_gemm_amx(DType t, const void* packed, int64_t K, int64_t n0, int64_t n1, const void* acts,
                        size_t a_row_bytes, int64_t T, float* y, int64_t ldy);

/// The scalar reference of packed_gemm (any machine): reads the packed layout element by element.
void packed_gemm_reference(DType t, const void* packed, int64_t K, int64_t n0, int64_t n1,
                           const void* acts, size_t a_row_bytes, int64_t T, float* y, int64_t ldy);

}  // namespace eg::cpu
