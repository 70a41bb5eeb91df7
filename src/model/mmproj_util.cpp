// Helpers shared by the mmproj writers (model/mmproj_detail.h).
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "model/mmproj_detail.h"
#include "quant/quant.h"

namespace eg::mmproj_detail {

DType parse_type(const std::string& type, uint32_t& ftype) {
  if (type == "f32") return ftype = 0, DType::F32;
  if (type == "f16") return ftype = 1, DType::F16;
  if (type == "q8_0") return ftype = 7, DType::Q8_0;
  throw Error("mmproj: unknown type '" + type + "' (supported: f32, f16, q8_0)");
}

KV general_keys(const std::string& dir, uint32_t ftype) {
  namespace fs = std::filesystem;
  std::string name = fs::path(dir).filename().string();
  if (name.empty()) name = fs::path(dir).parent_path().filename().string();
  KV kv;
  kv.emplace_back("general.architecture", GGUFValue::str("clip"));
  kv.emplace_back("general.type", GGUFValue::str("mmproj"));
  kv.emplace_back("general.name", GGUFValue::str(name));
  kv.emplace_back("general.file_type", GGUFValue::u32(ftype));
  kv.emplace_back("general.quantization_version", GGUFValue::u32(2));
  return kv;
}

void append_rows(GGUFWriter& w, const std::vector<float>& f, int64_t n0, DType d) {
  const int64_t rows = static_cast<int64_t>(f.size()) / n0;
  const size_t rb = dtype_row_bytes(d, n0);
  std::vector<uint8_t> bytes(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = f.data() + r * n0;
    uint8_t* dst = bytes.data() + r * rb;
    if (d == DType::F32) {
      std::memcpy(dst, x, rb);
    } else if (d == DType::F16) {
      for (int64_t e = 0; e < n0; ++e) {
        const uint16_t h = f32_to_f16(x[e]);
        std::memcpy(dst + 2 * e, &h, 2);
      }
    } else {
      quant::quantize_row(d, x, n0, dst);
    }
  }
  w.append(bytes.data(), bytes.size());
}

void verify_written(const std::string& out) {
  try {
    (void)open_mmproj(out);  // read back: what we write, we load
  } catch (const Error& e) {
    std::error_code ec;
    std::filesystem::remove(out, ec);
    throw Error(std::string("mmproj: the file written does not read back: ") + e.what());
  }
}

}  // namespace eg::mmproj_detail
