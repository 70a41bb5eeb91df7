// Packed weight layouts (packed.h): packing, unpacking, the scalar reference kernel and the
// dispatch to the machine's kernel (packed_avx512.cpp).
#include "backend/cpu/packed.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "quant/blocks.h"

namespace eg::cpu {

// Implemented in packed_avx512.cpp (compiled with function-level AVX-512 VNNI targets on x86).
bool packed_avx512_supported();
void packed_gemm_avx512(DType t, const void* packed, int64_t K, int64_t n0, int64_t n1, const void* acts,
                        size_t a_row_bytes, int64_t T, float* y, int64_t ldy);
bool packed_float_avx512_supported();
void packed_gemm_float_avx512(DType t, const void* packed, int64_t K, int64_t n0, int64_t n1, const float* x,
                              int64_t T, float* y, int64_t ldy);

namespace {

using quant::BlockQ4_0;
using quant::BlockQ8_0;

size_t column_bytes(DType t) {  // bytes of one block column of a 16-row group
  return t == DType::Q4_0 ? kPackRows * sizeof(BlockQ4_0) : kPackRows * sizeof(BlockQ8_0);
}

bool is_float_layout(DType t) { return t == DType::F16 || t == DType::BF16; }
bool has_layout(DType t) { return t == DType::Q4_0 || t == DType::Q8_0 || is_float_layout(t); }

float half_to_f32(DType t, uint16_t h) {
  if (t == DType::F16) return f16_to_f32(h);
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool repack_enabled() {
  const char* e = std::getenv("EDGEGEMMA_REPACK");
  return !(e && std::strcmp(e, "0") == 0);
}

// Pointer to block column b of group g.
const uint8_t* column(DType t, const void* packed, int64_t K, int64_t g, int64_t b) {
  const int64_t nb = K / 32;
  return static_cast<const uint8_t*>(packed) + (static_cast<size_t>(g * nb + b)) * column_bytes(t);
}

// The signed weight code of row r (0..15) element i (0..31) in a packed block column.
int code_at(DType t, const uint8_t* col, int r, int i) {
  const uint8_t* q = col + 32;  // after the 16 f16 scales
  if (t == DType::Q4_0) {
    const int j = (i % 16) / 4, k = i % 4;
    const uint8_t byte = q[64 * j + 4 * r + k];
    return (i < 16 ? (byte & 0x0F) : (byte >> 4)) - 8;
  }
  const int j = i / 4, k = i % 4;
  return static_cast<int>(q[64 * j + 4 * r + k]) - 128;
}

uint16_t scale_at(const uint8_t* col, int r) {
  uint16_t d;
  std::memcpy(&d, col + 2 * r, 2);
  return d;
}

}  // namespace

bool packable(DType t, int64_t rows, int64_t cols) {
  return has_layout(t) && rows > 0 && rows % kPackRows == 0 && cols > 0 && cols % 32 == 0;
}

bool packed_available(DType t) {
  static const bool machine = packed_avx512_supported();
  static const bool machine_float = packed_float_avx512_supported();
  static const bool enabled = repack_enabled();
  if (!enabled || !has_layout(t)) return false;
  return is_float_layout(t) ? machine_float : machine;
}

size_t packed_bytes(DType t, int64_t rows, int64_t cols) {
  if (!has_layout(t)) return 0;
  if (is_float_layout(t)) return static_cast<size_t>(rows) * static_cast<size_t>(cols) * 2;
  return static_cast<size_t>(rows / kPackRows) * static_cast<size_t>(cols / 32) * column_bytes(t);
}

void pack_groups(DType t, const void* src, int64_t rows, int64_t cols, int64_t g0, int64_t g1, void* dst) {
  if (!packable(t, rows, cols))
    throw Error(std::string("pack_groups: a ") + dtype_name(t) + " weight [" + std::to_string(rows) + ", " +
                std::to_string(cols) + "] has no packed layout");
  const int64_t nb = cols / 32;
  const size_t row_bytes = dtype_row_bytes(t, cols);
  const auto* s = static_cast<const uint8_t*>(src);
  if (is_float_layout(t)) {  // [group][k][16 rows] of 2-byte values
    auto* d = static_cast<uint16_t*>(dst);
    for (int64_t g = g0; g < g1; ++g)
      for (int r = 0; r < kPackRows; ++r) {
        const auto* row = reinterpret_cast<const uint16_t*>(s + static_cast<size_t>(g * kPackRows + r) * row_bytes);
        uint16_t* out = d + static_cast<size_t>(g) * cols * kPackRows + r;
        for (int64_t k = 0; k < cols; ++k) out[k * kPackRows] = row[k];
      }
    return;
  }
  for (int64_t g = g0; g < g1; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      auto* col = const_cast<uint8_t*>(column(t, dst, cols, g, b));
      uint8_t* q = col + 32;
      for (int r = 0; r < kPackRows; ++r) {
        const uint8_t* row = s + static_cast<size_t>(g * kPackRows + r) * row_bytes;
        if (t == DType::Q4_0) {
          const auto& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
          std::memcpy(col + 2 * r, &blk.d, 2);
          // blk.qs[m]: low nibble = element m, high nibble = element m + 16 (m < 16).
          for (int j = 0; j < 4; ++j)
            for (int k = 0; k < 4; ++k) q[64 * j + 4 * r + k] = blk.qs[4 * j + k];
        } else {
          const auto& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
          std::memcpy(col + 2 * r, &blk.d, 2);
          for (int j = 0; j < 8; ++j)
            for (int k = 0; k < 4; ++k)
              q[64 * j + 4 * r + k] = static_cast<uint8_t>(static_cast<int>(blk.qs[4 * j + k]) + 128);
        }
      }
    }
  }
}

void unpack_row(DType t, const void* packed, int64_t rows, int64_t cols, int64_t n, void* out_row) {
  if (!packable(t, rows, cols) || n < 0 || n >= rows) throw Error("unpack_row: bad weight or row");
  const int64_t nb = cols / 32, g = n / kPackRows;
  const int r = static_cast<int>(n % kPackRows);
  if (is_float_layout(t)) {
    const auto* in = static_cast<const uint16_t*>(packed) + static_cast<size_t>(g) * cols * kPackRows + r;
    auto* out = static_cast<uint16_t*>(out_row);
    for (int64_t k = 0; k < cols; ++k) out[k] = in[k * kPackRows];
    return;
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* col = column(t, packed, cols, g, b);
    if (t == DType::Q4_0) {
      auto& blk = static_cast<BlockQ4_0*>(out_row)[b];
      blk.d = scale_at(col, r);
      for (int m = 0; m < 16; ++m)
        blk.qs[m] = static_cast<uint8_t>((code_at(t, col, r, m) + 8) | ((code_at(t, col, r, m + 16) + 8) << 4));
    } else {
      auto& blk = static_cast<BlockQ8_0*>(out_row)[b];
      blk.d = scale_at(col, r);
      for (int i = 0; i < 32; ++i) blk.qs[i] = static_cast<int8_t>(code_at(t, col, r, i));
    }
  }
}

void packed_gemm_reference(DType t, const void* packed, int64_t K, int64_t n0, int64_t n1, const void* acts,
                           size_t a_row_bytes, int64_t T, float* y, int64_t ldy) {
  const int64_t nb = K / 32;
  for (int64_t t_ = 0; t_ < T; ++t_) {
    const auto* a = reinterpret_cast<const ActQ8*>(static_cast<const uint8_t*>(acts) + t_ * a_row_bytes);
    for (int64_t n = n0; n < n1; ++n) {
      const int64_t g = n / kPackRows;
      const int r = static_cast<int>(n % kPackRows);
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* col = column(t, packed, K, g, b);
        int32_t isum = 0;
        for (int i = 0; i < 32; ++i) isum += code_at(t, col, r, i) * a[b].qs[i];
        acc = std::fma(f16_to_f32(scale_at(col, r)) * a[b].d, static_cast<float>(isum), acc);
      }
      y[t_ * ldy + n] = acc;
    }
  }
}

void packed_gemm_float_reference(DType t, const void* packed, int64_t K, int64_t n0, int64_t n1, const float* x,
                                 int64_t T, float* y, int64_t ldy) {
  const auto* w = static_cast<const uint16_t*>(packed);
  for (int64_t t_ = 0; t_ < T; ++t_)
    for (int64_t n = n0; n < n1; ++n) {
      const uint16_t* col = w + static_cast<size_t>(n / kPackRows) * K * kPackRows + n % kPackRows;
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) acc = std::fma(half_to_f32(t, col[k * kPackRows]), x[t_ * K + k], acc);
      y[t_ * ldy + n] = acc;
    }
}

void packed_gemm_float(DType t, const void* packed, int64_t K, int64_t n0, int64_t n1, const float* x, int64_t T,
                       float* y, int64_t ldy) {
  packed_gemm_float_avx512(t, packed, K, n0, n1, x, T, y, ldy);
}

void packed_gemm(DType t, const void* packed, int64_t K, int64_t n0, int64_t n1, const void* acts,
                 size_t a_row_bytes, int64_t T, float* y, int64_t ldy) {
  packed_gemm_avx512(t, packed, K, n0, n1, acts, a_row_bytes, T, y, ldy);
}

}  // namespace eg::cpu
