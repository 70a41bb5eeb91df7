#include "core/file_util.h"

#include <algorithm>

#include <cerrno>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace eg {

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error("cannot read " + path + ": is a directory");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw Error("error while reading " + path);
  return ss.str();
}

std::string read_stream(std::FILE* f) {
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  return out;
}

bool write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = ::write(fd, c, std::min<size_t>(n, size_t{1} << 30));
    if (k < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (k == 0) {
      errno = EIO;
      return false;
    }
    c += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

}  // namespace eg
