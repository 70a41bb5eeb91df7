// SHA-256 (FIPS 180-4), for the knowledge base's content hashes (files and chunks). Streaming:
// update() any number of times, then hex(). Note for merging: the model store (src/store/) may
// bring its own SHA-256; keep one.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace eg::kb {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  /// The 32-byte digest; the object must not be updated afterwards.
  std::array<uint8_t, 32> digest();
  /// The digest as 64 lowercase hex digits.
  std::string hex();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

/// Lowercase hex SHA-256 of `s`.
std::string sha256_hex(std::string_view s);

}  // namespace eg::kb
