#include "core/sha256.h"

#include <fcntl.h>
#include <nettle/sha2.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace eg {

struct Sha256::Ctx {
  sha256_ctx c;
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) { sha256_init(&ctx_->c); }
Sha256::~Sha256() = default;

void Sha256::update(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {  // nettle takes size_t lengths, but stay within any 32-bit build's limits
    const size_t k = n < (size_t{1} << 30) ? n : (size_t{1} << 30);
    sha256_update(&ctx_->c, k, b);
    b += k;
    n -= k;
  }
}

std::string Sha256::hex() {
  uint8_t d[SHA256_DIGEST_SIZE];
  sha256_digest(&ctx_->c, sizeof d, d);  // also re-initialises the context
  static const char* kHex = "0123456789abcdef";
  std::string s(2 * sizeof d, '0');
  for (size_t i = 0; i < sizeof d; ++i) {
    s[2 * i] = kHex[d[i] >> 4];
    s[2 * i + 1] = kHex[d[i] & 15];
  }
  return s;
}

std::string sha256_hex(std::string_view data) {
  Sha256 h;
  h.update(data);
  return h.hex();
}

std::string sha256_file(const std::string& path, uint64_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot read " + path + ": " + std::strerror(errno));
  Sha256 h;
  std::vector<char> buf(1 << 20);
  uint64_t total = 0;
  for (;;) {
    const ssize_t k = ::read(fd, buf.data(), buf.size());
    if (k < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      throw Error("error while reading " + path + ": " + std::strerror(e));
    }
    if (k == 0) break;
    h.update(buf.data(), static_cast<size_t>(k));
    total += static_cast<uint64_t>(k);
  }
  ::close(fd);
  if (size) *size = total;
  return h.hex();
}

bool is_sha256_hex(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace eg
