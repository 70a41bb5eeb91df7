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
// Q6_Kx16 (packed_q6k.cpp, packed_q6k_avx512.cpp).
size_t q6k_column_bytes();
void pack_groups_q6k(const void* src, int64_t cols, int64_t g0, int64_t g1, void* dst);
void unpack_row_q6k(const void* packed, int64_t cols, int64_t n, void* out_row);
void packed_gemm_q6k_reference(const void* packed, int64_t K, int64_t n0, int64_t n1, const void* acts,
                               size_t a_row_bytes, int64_t T, float* y, int64_t ldy);
void packed_gemm_q6k_avx512(const void* packed, int64_t K, int64_t n0, int64_t n1, const void* acts,
                            size_t a_row_bytes, int64_t T, float* y, int64_t ldy);

namespace {

using quant::BlockQ4_0;
using quant::BlockQ8_0;

static_assert(kPackColBytes<true> == kPackRows * sizeof(BlockQ4_0), "packed.h: Q4_0 column size");
static_assert(kPackColBytes<false> == kPackRows * sizeof(BlockQ8_0), "packed.h: Q8_0 column size");

size_t column_bytes(DType t) {  // bytes of one block column of a 16-row group
  return t == DType::Q4_0 ? kPackColBytes<true> : kPackColBytes<false>;
}

bool is_float_layout(DType t) { return t == DType::F16 || t == DType::BF16 || t == DType::F32; }
bool has_layout(DType t) {
  return t == DType::Q4_0 || t == DType::Q8_0 || t == DType::Q6_K || is_float_layout(t);
}
size_t float_elem_bytes(DType t) { return t == DType::F32 ? 4 : 2; }

// Element i of a float layout (F16, BF16 or F32 values), exactly converted to f32.
float float_at(DType t, const void* base, size_t i) {
  if (t == DType::F32) {
    float f;
    std::memcpy(&f, static_cast<const uint8_t*>(base) + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, static_cast<const uint8_t*>(base) + 2 * i, 2);
  if (t == DType::F16) return f16_to_f32(h);
  return bf16_to_f32(h);
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
  const int64_t block = t == DType::Q6_K ? 256 : 32;
  return has_layout(t) && rows > 0 && rows % kPackRows == 0 && cols > 0 && cols % block == 0;
}

bool packed_available(DType t) {
  static const bool machine = packed_avx512_supported();
  static const bool machine_float = packed_float_avx512_supported();
  static const bool enabled = repack_enabled();
  if (!enabled || !has_layout(t)) return false;
  return is_float_layout(t) ? machine_float : machine;
}

bool packed_by_default(DType t) {
  if (!packed_available(t)) return false;
  if (t != DType::Q6_K) return true;
  static const bool q6k = [] {
    const char* e = std::getenv("EDGEGEMMA_REPACK_Q6K");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }();
  return q6k;
}

size_t packed_bytes(DType t, int64_t rows, int64_t cols) {
  if (!has_layout(t)) return 0;
  if (is_float_layout(t)) return static_cast<size_t>(rows) * static_cast<size_t>(cols) * float_elem_bytes(t);
  if (t == DType::Q6_K) return static_cast<size_t>(rows / kPackRows) * static_cast<size_t>(cols / 256) * q6k_column_bytes();
  return static_cast<size_t>(rows / kPackRows) * static_cast<size_t>(cols / 32) * column_bytes(t);
}

void pack_groups(DType t, const void* src, int64_t rows, int64_t cols, int64_t g0, int64_t g1, void* dst) {
  if (!packable(t, rows, cols))
    throw Error(std::string("pack_groups: a ") + dtype_name(t) + " weight [" + std::to_string(rows) + ", " +
                std::to_string(cols) + "] has no packed layout");
  const int64_t nb = cols / 32;
  const size_t row_bytes = dtype_row_bytes(t, cols);
  const auto* s = static_cast<const uint8_t*>(src);
  if (is_float_layout(t)) {  // [group][k][16 rows] of 2- or 4-byte values
    const size_t e = float_elem_bytes(t);
    auto* d = static_cast<uint8_t*>(dst);
    for (int64_t g = g0; g < g1; ++g)
      for (int r = 0; r < kPackRows; ++r) {
        const uint8_t* row = s + static_cast<size_t>(g * kPackRows + r) * row_bytes;
        uint8_t* out = d + (static_cast<size_t>(g) * cols * kPackRows + r) * e;
        for (int64_t k = 0; k < cols; ++k) std::memcpy(out + static_cast<size_t>(k) * kPackRows * e, row + k * e, e);
      }
    return;
  }
  if (t == DType::Q6_K) {
    pack_groups_q6k(src, cols, g0, g1, dst);
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
    const size_t e = float_elem_bytes(t);
    const auto* in = static_cast<const uint8_t*>(packed) + (static_cast<size_t>(g) * cols * kPackRows + r) * e;
    auto* out = static_cast<uint8_t*>(out_row);
    for (int64_t k = 0; k < cols; ++k) std::memcpy(out + k * e, in + static_cast<size_t>(k) * kPackRows * e, e);
    return;
  }
  if (t == DType::Q6_K) {
    unpack_row_q6k(packed, cols, n, out_row);
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
  if (t == DType::Q6_K) {
    packed_gemm_q6k_reference(packed, K, n0, n1, acts, a_row_bytes, T, y, ldy);
    return;
  }
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
  for (int64_t t_ = 0; t_ < T; ++t_)
    for (int64_t n = n0; n < n1; ++n) {
      const size_t col = static_cast<size_t>(n / kPackRows) * K * kPackRows + n % kPackRows;
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k)
        acc = std::fma(float_at(t, packed, col + static_cast<size_t>(k) * kPackRows), x[t_ * K + k], acc);
      y[t_ * ldy + n] = acc;
    }
}

void packed_gemm_float(DType t, const void* packed, int64_t K, int64_t n0, int64_t n1, const float* x, int64_t T,
                       float* y, int64_t ldy) {
  packed_gemm_float_avx512(t, packed, K, n0, n1, x, T, y, ldy);
}

void packed_gemm(DType t, const void* packed, int64_t K, int64_t n0, int64_t n1, const void* acts,
                 size_t a_row_bytes, int64_t T, float* y, int64_t ldy) {
  if (t == DType::Q6_K) {
    packed_gemm_q6k_avx512(packed, K, n0, n1, acts, a_row_bytes, T, y, ldy);
    return;
  }
  packed_gemm_avx512(t, packed, K, n0, n1, acts, a_row_bytes, T, y, ldy);
}

}  // namespace eg::cpu
