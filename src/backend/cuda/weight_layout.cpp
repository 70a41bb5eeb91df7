// The tiled GPU weight layout (cuda_backend.h, DeviceWeight): built on the host, then uploaded.
// Host-only code (no CUDA API calls besides DeviceBuffer's), compiled by the C++ compiler.
#include <cstring>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/q6k.h"
#include "core/error.h"
#include "quant/blocks.h"

namespace eg::cuda {
namespace {

struct ChunkShape {
  int elems;        // elements per chunk
  int chunk_bytes;  // bytes of one chunk in the tiled data array
};

ChunkShape chunk_shape(DType t) {
  switch (t) {
    case DType::Q4_0: return {32, 16};
    case DType::Q8_0: return {32, 32};
    case DType::F16:
    case DType::BF16: return {8, 16};
    default: break;
  }
  throw Error(std::string("CUDA matvec: weight type ") + dtype_name(t) +
              " is not supported (Q4_0, Q8_0, F16, BF16)");
}

}  // namespace

bool matvec_supports(DType t) {
  return t == DType::Q4_0 || t == DType::Q8_0 || t == DType::F16 || t == DType::BF16;
}

size_t DeviceWeight::gguf_bytes() const {
  return static_cast<size_t>(rows) * dtype_row_bytes(dtype, cols);
}

size_t act_q8_bytes(int64_t K) {
  return static_cast<size_t>(K) + static_cast<size_t>(K / 32) * 8;
}

HostTiledWeight tile_weight(const void* src, DType t, int64_t rows, int64_t cols) {
  const ChunkShape cs = chunk_shape(t);
  if (rows <= 0 || cols <= 0 || cols % cs.elems != 0) {
    throw Error(std::string("CUDA matvec: a ") + dtype_name(t) + " weight of " +
                std::to_string(rows) + "x" + std::to_string(cols) +
                " (columns must be a positive multiple of " + std::to_string(cs.elems) + ")");
  }
  const int64_t n_chunks = cols / cs.elems;
  const int64_t tiles = (rows + kTileRows - 1) / kTileRows;
  const size_t row_bytes = dtype_row_bytes(t, cols);
  const bool blocked = is_quantized(t);
  HostTiledWeight out;
  out.data.assign(static_cast<size_t>(tiles * n_chunks * kTileRows) * cs.chunk_bytes, '\0');
  if (blocked) out.scales.assign(static_cast<size_t>(tiles * n_chunks * kTileRows) * 2, '\0');
  const auto* base = static_cast<const uint8_t*>(src);
  for (int64_t n = 0; n < rows; ++n) {
    const int64_t tile = n / kTileRows, r = n % kTileRows;
    const uint8_t* row = base + static_cast<size_t>(n) * row_bytes;
    for (int64_t c = 0; c < n_chunks; ++c) {
      const size_t slot = static_cast<size_t>((tile * n_chunks + c) * kTileRows + r);
      char* dst = out.data.data() + slot * cs.chunk_bytes;
      if (t == DType::Q4_0) {
        const auto* b = reinterpret_cast<const quant::BlockQ4_0*>(row) + c;
        std::memcpy(dst, b->qs, 16);
        std::memcpy(out.scales.data() + slot * 2, &b->d, 2);
      } else if (t == DType::Q8_0) {
        const auto* b = reinterpret_cast<const quant::BlockQ8_0*>(row) + c;
        std::memcpy(dst, b->qs, 32);
        std::memcpy(out.scales.data() + slot * 2, &b->d, 2);
      } else {
        std::memcpy(dst, row + c * 16, 16);
      }
    }
  }
  return out;
}

DeviceWeight upload_weight(const void* src, DType t, int64_t rows, int64_t cols) {
  if (t == DType::Q6_K) return upload_q6k(src, rows, cols);  // the embedding's block layout (q6k.h)
  HostTiledWeight h = tile_weight(src, t, rows, cols);
  DeviceWeight w;
  w.dtype = t;
  w.rows = rows;
  w.cols = cols;
  w.data = DeviceBuffer(h.data.size());
  w.data.upload(h.data.data(), h.data.size());
  if (!h.scales.empty()) {
    w.scales = DeviceBuffer(h.scales.size());
    w.scales.upload(h.scales.data(), h.scales.size());
  }
  return w;
}

}  // namespace eg::cuda
