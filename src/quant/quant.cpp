// Dispatch of quantize_row / dequantize_row to the per-family implementations.
#include "quant/quant.h"

#include <string>

#include "backend/cpu/kernels.h"
#include "core/error.h"

namespace eg::quant {
namespace {

void check_n(DType t, int64_t n, const char* what) {
  if (n < 0 || n % dtype_block_elems(t) != 0) {
    throw Error(std::string(what) + ": row length " + std::to_string(n) + " is not a multiple of " +
                std::to_string(dtype_block_elems(t)) + " (block size of " + dtype_name(t) + ")");
  }
}

}  // namespace

void quantize_row(DType t, const float* x, int64_t n, void* out) {
  if (!is_quantized(t)) {
    throw Error(std::string("quantize_row: ") + dtype_name(t) + " is not a block-quantized type");
  }
  check_n(t, n, "quantize_row");
  switch (t) {
    case DType::Q8_0: return quantize_q8_0(x, n, static_cast<BlockQ8_0*>(out));
    case DType::Q4_0: return quantize_q4_0(x, n, static_cast<BlockQ4_0*>(out));
    case DType::Q4_1: return quantize_q4_1(x, n, static_cast<BlockQ4_1*>(out));
    case DType::Q5_0: return quantize_q5_0(x, n, static_cast<BlockQ5_0*>(out));
    case DType::Q5_1: return quantize_q5_1(x, n, static_cast<BlockQ5_1*>(out));
    case DType::Q4_K: return quantize_q4_k(x, n, static_cast<BlockQ4_K*>(out));
    case DType::Q5_K: return quantize_q5_k(x, n, static_cast<BlockQ5_K*>(out));
    case DType::Q6_K: return quantize_q6_k(x, n, static_cast<BlockQ6_K*>(out));
    case DType::Q8_K: return quantize_q8_k(x, n, static_cast<BlockQ8_K*>(out));
    case DType::EG_Q4_G128: return quantize_eg_q4_g128(x, n, static_cast<BlockEGQ4G128*>(out));
    default: break;
  }
  throw Error(std::string("quantize_row: unsupported type ") + dtype_name(t));
}

void dequantize_row(DType t, const void* in, int64_t n, float* out) {
  check_n(t, n, "dequantize_row");
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16:
      return cpu::to_f32(in, t, static_cast<size_t>(n), out);
    case DType::Q8_0: return dequantize_q8_0(static_cast<const BlockQ8_0*>(in), n, out);
    case DType::Q4_0: return dequantize_q4_0(static_cast<const BlockQ4_0*>(in), n, out);
    case DType::Q4_1: return dequantize_q4_1(static_cast<const BlockQ4_1*>(in), n, out);
    case DType::Q5_0: return dequantize_q5_0(static_cast<const BlockQ5_0*>(in), n, out);
    case DType::Q5_1: return dequantize_q5_1(static_cast<const BlockQ5_1*>(in), n, out);
    case DType::Q4_K: return dequantize_q4_k(static_cast<const BlockQ4_K*>(in), n, out);
    case DType::Q5_K: return dequantize_q5_k(static_cast<const BlockQ5_K*>(in), n, out);
    case DType::Q6_K: return dequantize_q6_k(static_cast<const BlockQ6_K*>(in), n, out);
    case DType::Q8_K: return dequantize_q8_k(static_cast<const BlockQ8_K*>(in), n, out);
    case DType::EG_Q4_G128:
      return dequantize_eg_q4_g128(static_cast<const BlockEGQ4G128*>(in), n, out);
  }
  throw Error(std::string("dequantize_row: unsupported type ") + dtype_name(t));
}

}  // namespace eg::quant
