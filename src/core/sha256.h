// SHA-256 (FIPS 180-4), for content identities: the digest of an embedding model's weight files
// (embed/), the knowledge base's file and chunk hashes (kb/). Not used for security decisions.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace eg {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  /// The digest as 64 lowercase hex characters; the object is spent afterwards.
  std::string hex();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_n_ = 0;
  uint64_t total_ = 0;
};

/// Lowercase hex SHA-256 of `s`.
std::string sha256_hex(std::string_view s);

/// sha256 hex of a whole file, read in chunks. Throws eg::Error naming the file on I/O failure.
std::string sha256_file(const std::string& path);

}  // namespace eg
