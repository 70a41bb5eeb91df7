// SHA-256 (FIPS 180-4) over nettle's implementation (Debian: nettle-dev), hex-encoded digests: the
// content identities of the model store (blobs), the knowledge base (files, chunks) and embedding
// models (the digest of their weights). Not used for security decisions beyond integrity.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace eg {

/// Incremental SHA-256. hex() finishes the hash: 64 lowercase hex digits; the object is reset
/// afterwards (a second hex() is the digest of the empty input).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* p, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::string hex();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

/// SHA-256 of a string, hex.
std::string sha256_hex(std::string_view data);
/// SHA-256 of a whole file, hex; *size (optional) receives its length in bytes. Throws eg::Error
/// naming the file when it cannot be read.
std::string sha256_file(const std::string& path, uint64_t* size = nullptr);
/// True for exactly 64 lowercase hex digits.
bool is_sha256_hex(std::string_view s);

}  // namespace eg
