// Helpers shared by the safetensors tests (crafting files, capturing eg::Error messages).
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "format/safetensors.h"
#include "test_util.h"

namespace sttest {

using json = nlohmann::json;

inline std::string tiny_model_dir() { return egtest::shared_dir() + "/models/tiny-gemma3"; }
inline std::string tiny_model_file() { return tiny_model_dir() + "/model.safetensors"; }

inline std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

/// A safetensors file from a raw header text (no padding added) and `data_bytes` zero bytes.
inline std::string make_file(const std::string& header, size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\0');
}

/// Runs `fn`, expects eg::Error, and returns its message.
template <class F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const eg::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected eg::Error, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected eg::Error, nothing thrown";
  return "";
}

/// Opens `header`+data written to a temp file and returns the error message (or "" + failure).
inline std::string open_error(const std::string& header, size_t data_bytes,
                       std::string* path_out = nullptr) {
  static const std::string dir = egtest::make_temp_dir();
  static int counter = 0;
  const std::string path = dir + "/bad" + std::to_string(counter++) + ".safetensors";
  egtest::write_file(path, make_file(header, data_bytes));
  if (path_out) *path_out = path;
  return error_of([&] { eg::TensorStore::open_file(path); });
}

inline bool one_line(const std::string& s) { return s.find('\n') == std::string::npos; }

inline uint32_t f32_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

/// The header JSON of a safetensors byte string (for checking the writer independently).
inline json header_of(const std::string& bytes, uint64_t* n_out = nullptr) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  if (n_out) *n_out = n;
  return json::parse(bytes.substr(8, n));
}


}  // namespace sttest
