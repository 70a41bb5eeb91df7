// The Q6_Kx16 layout (packed.h): packing, unpacking and the scalar reference kernel.
//
// A GGUF Q6_K block (quant/blocks.h, 256 elements, 210 bytes) stores element e's 6-bit code
// q = lo4 | hi2 << 4 (0..63) split over ql (low nibbles) and qh (2-bit pairs), 16 int8 sub-block
// scales (one per 16 elements) and an f16 d; weight = d·scale[e/16]·(q − 32). The packed block
// column of a 16-row group (3360 bytes = 16 × 210) holds the same bits regrouped so that one
// 64-byte load gives 4 consecutive elements ("chunk" c = elements 4c..4c+3) of each of the 16
// rows, row r at bytes 4r..4r+3:
//   [0, 32)       16 × f16 d (row r at 2r)
//   [32, 288)     scales: byte 32 + 16s + r = scale of sub-block s (elements 16s..16s+15), row r
//   [288, 2336)   32 low-nibble vectors v = 0..31: byte i of row r = lo4(4v+i) | lo4(4(v+32)+i) << 4
//   [2336, 3360)  16 high-bit vectors h = 0..15: byte i of row r = Σ_k hi2(4(h+16k)+i) << 2k
// so low vector v holds chunks v and v+32, high vector h chunks h, h+16, h+32, h+48.
//
// Arithmetic (identical to the Q6_K row kernel, quant_kernels.cpp): per 256-block the exact
// integer is = Σ_s scale_s·Σ_{e in s} q_e·x_e − 32·Σ_s scale_s·bsum_s, then
// acc = acc + (d·d_x)·float(is) (a product and a sum, each rounded) over the blocks in order.
#include <cstring>

#include "backend/cpu/packed.h"
#include "core/error.h"
#include "quant/blocks.h"

namespace eg::cpu {

namespace {

using quant::BlockQ6_K;
using quant::BlockQ8_K;

constexpr size_t kQ6Col = 3360;
constexpr size_t kScales = 32, kLo = 288, kHi = 2336;

// Element e (0..255) of a GGUF Q6_K block: e = 128h + 32·quarter + l reads ql[64h + 32·(quarter&1)
// + l] (low nibble for quarters 0, 1, high for 2, 3) and bits 2·quarter of qh[32h + l], as ggml's
// dequantize_row_q6_K does.
void set_code(BlockQ6_K& b, int e, int q) {
  const int h = e / 128, quarter = (e % 128) / 32, l = e % 32;
  uint8_t& ql = b.ql[64 * h + 32 * (quarter & 1) + l];
  ql = static_cast<uint8_t>(ql | (quarter < 2 ? (q & 0x0F) : (q & 0x0F) << 4));
  b.qh[32 * h + l] = static_cast<uint8_t>(b.qh[32 * h + l] | ((q >> 4) & 3) << (2 * quarter));
}

const uint8_t* col_of(const void* packed, int64_t K, int64_t g, int64_t b) {
  return static_cast<const uint8_t*>(packed) + static_cast<size_t>(g * (K / 256) + b) * kQ6Col;
}

// Code of row r element e in a packed block column.
int packed_code(const uint8_t* col, int r, int e) {
  const int c = e / 4, i = e % 4;
  const int v = c % 32, hv = c % 16, k = c / 16;
  const uint8_t lo = col[kLo + 64 * v + 4 * r + i];
  const int lo4 = c < 32 ? (lo & 0x0F) : (lo >> 4);
  const int hi2 = (col[kHi + 64 * hv + 4 * r + i] >> (2 * k)) & 3;
  return lo4 | (hi2 << 4);
}

}  // namespace

size_t q6k_column_bytes() { return kQ6Col; }

void pack_groups_q6k(const void* src, int64_t cols, int64_t g0, int64_t g1, void* dst) {
  const int64_t nb = cols / 256;
  const auto* rows = static_cast<const BlockQ6_K*>(src);
  for (int64_t g = g0; g < g1; ++g)
    for (int64_t b = 0; b < nb; ++b) {
      auto* col = const_cast<uint8_t*>(col_of(dst, cols, g, b));
      std::memset(col, 0, kQ6Col);
      for (int r = 0; r < kPackRows; ++r) {
        const BlockQ6_K& blk = rows[(g * kPackRows + r) * nb + b];
        std::memcpy(col + 2 * r, &blk.d, 2);
        for (int s = 0; s < 16; ++s) col[kScales + 16 * s + r] = static_cast<uint8_t>(blk.scales[s]);
        uint8_t q[256];  // the codes, element by element (code_of, unrolled)
        for (int h = 0; h < 2; ++h)
          for (int l = 0; l < 32; ++l) {
            const uint8_t a = blk.ql[64 * h + l], c = blk.ql[64 * h + 32 + l], hb = blk.qh[32 * h + l];
            q[128 * h + l] = static_cast<uint8_t>((a & 0x0F) | (hb & 3) << 4);
            q[128 * h + 32 + l] = static_cast<uint8_t>((c & 0x0F) | ((hb >> 2) & 3) << 4);
            q[128 * h + 64 + l] = static_cast<uint8_t>((a >> 4) | ((hb >> 4) & 3) << 4);
            q[128 * h + 96 + l] = static_cast<uint8_t>((c >> 4) | ((hb >> 6) & 3) << 4);
          }
        for (int v = 0; v < 32; ++v)
          for (int i = 0; i < 4; ++i)
            col[kLo + 64 * v + 4 * r + i] = static_cast<uint8_t>((q[4 * v + i] & 0x0F) | (q[128 + 4 * v + i] & 0x0F) << 4);
        for (int h = 0; h < 16; ++h)
          for (int i = 0; i < 4; ++i) {
            int byte = 0;
            for (int k = 0; k < 4; ++k) byte |= ((q[4 * (h + 16 * k) + i] >> 4) & 3) << (2 * k);
            col[kHi + 64 * h + 4 * r + i] = static_cast<uint8_t>(byte);
          }
      }
    }
}

void unpack_row_q6k(const void* packed, int64_t cols, int64_t n, void* out_row) {
  const int64_t nb = cols / 256, g = n / kPackRows;
  const int r = static_cast<int>(n % kPackRows);
  auto* out = static_cast<BlockQ6_K*>(out_row);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* col = col_of(packed, cols, g, b);
    BlockQ6_K& blk = out[b];
    std::memset(&blk, 0, sizeof blk);
    std::memcpy(&blk.d, col + 2 * r, 2);
    for (int s = 0; s < 16; ++s) blk.scales[s] = static_cast<int8_t>(col[kScales + 16 * s + r]);
    for (int e = 0; e < 256; ++e) set_code(blk, e, packed_code(col, r, e));
  }
}

void packed_gemm_q6k_reference(const void* packed, int64_t K, int64_t n0, int64_t n1, const void* acts,
                               size_t a_row_bytes, int64_t T, float* y, int64_t ldy) {
  const int64_t nb = K / 256;
  for (int64_t t = 0; t < T; ++t) {
    const auto* a = reinterpret_cast<const BlockQ8_K*>(static_cast<const uint8_t*>(acts) + t * a_row_bytes);
    for (int64_t n = n0; n < n1; ++n) {
      const int64_t g = n / kPackRows;
      const int r = static_cast<int>(n % kPackRows);
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* col = col_of(packed, K, g, b);
        int32_t is = 0;
        for (int s = 0; s < 16; ++s) {
          int32_t sub = 0;
          for (int e = 16 * s; e < 16 * s + 16; ++e) sub += packed_code(col, r, e) * a[b].qs[e];
          is += static_cast<int8_t>(col[kScales + 16 * s + r]) * (sub - 32 * a[b].bsums[s]);
        }
        uint16_t d;
        std::memcpy(&d, col + 2 * r, 2);
        acc = acc + (f16_to_f32(d) * a[b].d) * static_cast<float>(is);
      }
      y[t * ldy + n] = acc;
    }
  }
}

}  // namespace eg::cpu
