// Fixture access for the vision tests: the multimodal fixtures' reference arrays
// (shared/models/tiny-gemma{3-vision,4-mm}/reference_arrays.safetensors: F32 / I32 / U8, which
// the engine's TensorStore does not take) and their reference.json.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace egtest {

struct RefArray {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  std::vector<float> f32() const {
    if (dtype != "F32") throw std::runtime_error("not F32");
    std::vector<float> v(numel());
    std::memcpy(v.data(), bytes.data(), v.size() * 4);
    return v;
  }
  std::vector<int32_t> i32() const {
    if (dtype != "I32") throw std::runtime_error("not I32");
    std::vector<int32_t> v(numel());
    std::memcpy(v.data(), bytes.data(), v.size() * 4);
    return v;
  }
};

/// All arrays of a reference_arrays.safetensors.
inline std::map<std::string, RefArray> read_ref_arrays(const std::string& path) {
  const std::string f = read_file(path);
  uint64_t n = 0;
  std::memcpy(&n, f.data(), 8);
  const auto h = nlohmann::json::parse(f.substr(8, n));
  std::map<std::string, RefArray> out;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    RefArray a;
    a.dtype = it.value()["dtype"];
    a.shape = it.value()["shape"].get<std::vector<int64_t>>();
    const auto off = it.value()["data_offsets"].get<std::vector<uint64_t>>();
    a.bytes = f.substr(8 + n + off[0], off[1] - off[0]);
    out[it.key()] = std::move(a);
  }
  return out;
}

inline std::string g3v_dir() { return shared_dir() + "/models/tiny-gemma3-vision"; }
inline std::string g4mm_dir() { return shared_dir() + "/models/tiny-gemma4-mm"; }
inline nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(read_file(path)); }

/// max |a − b| and max |b|.
struct Diff {
  double max_abs = 0, max_ref = 0;
};
inline Diff diff(const float* a, const float* b, size_t n) {
  Diff d;
  for (size_t i = 0; i < n; ++i) {
    d.max_abs = std::max(d.max_abs, std::abs(static_cast<double>(a[i]) - b[i]));
    d.max_ref = std::max(d.max_ref, std::abs(static_cast<double>(b[i])));
  }
  return d;
}

}  // namespace egtest
