#include "store/durable.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "core/file_util.h"
#include "store/sha256.h"

namespace eg::store {

namespace {

std::string errstr() { return std::strerror(errno); }

}  // namespace

void crash_point(std::string_view step) {
  static const char* at = std::getenv("EDGEGEMMA_STORE_CRASH_AT");
  static const bool trace = std::getenv("EDGEGEMMA_STORE_TRACE") != nullptr;
  if (!at && !trace) return;
  static std::mutex mu;
  static std::map<std::string, int, std::less<>> seen;
  int k;
  {
    std::lock_guard<std::mutex> lk(mu);
    k = ++seen[std::string(step)];
  }
  const std::string name = std::string(step) + "#" + std::to_string(k);
  if (trace) std::fprintf(stderr, "store-step: %s\n", name.c_str());
  if (at && (name == at || (k == 1 && step == at))) {
    std::fflush(stderr);
    ::raise(SIGKILL);
  }
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open directory " + dir + ": " + errstr());
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  if (rc != 0 && e != EINVAL) throw Error("cannot sync directory " + dir + ": " + std::strerror(e));
}

void rename_path(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) throw Error("cannot rename " + from + " to " + to + ": " + errstr());
}

void atomic_write(const std::string& path, std::string_view data, std::string_view step) {
  static std::atomic<int> counter{0};
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot create " + tmp + ": " + errstr());
  if (!write_all(fd, data.data(), data.size()) || ::fsync(fd) != 0) {
    const std::string e = errstr();
    ::close(fd);
    ::unlink(tmp.c_str());
    throw Error("cannot write " + tmp + ": " + e);
  }
  ::close(fd);
  crash_point(std::string(step) + ".tmp");
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string e = errstr();
    ::unlink(tmp.c_str());
    throw Error("cannot rename " + tmp + " to " + path + ": " + e);
  }
  crash_point(std::string(step) + ".renamed");
  fsync_dir(dir);
}

std::string copy_hashing(const std::string& src, const std::string& dst, uint64_t* size) {
  const int in = ::open(src.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) throw Error("cannot read " + src + ": " + errstr());
  const int out = ::open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
  if (out < 0) {
    const std::string e = errstr();
    ::close(in);
    throw Error("cannot create " + dst + ": " + e);
  }
  auto fail = [&](const std::string& msg) {
    ::close(in);
    ::close(out);
    ::unlink(dst.c_str());
    throw Error(msg);
  };
  Sha256 h;
  std::vector<char> buf(1 << 20);
  uint64_t total = 0;
  for (;;) {
    const ssize_t k = ::read(in, buf.data(), buf.size());
    if (k < 0) {
      if (errno == EINTR) continue;
      fail("error while reading " + src + ": " + errstr());
    }
    if (k == 0) break;
    h.update(buf.data(), static_cast<size_t>(k));
    if (!write_all(out, buf.data(), static_cast<size_t>(k))) fail("cannot write " + dst + ": " + errstr());
    total += static_cast<uint64_t>(k);
  }
  if (::fsync(out) != 0) fail("cannot sync " + dst + ": " + errstr());
  ::close(in);
  ::close(out);
  if (size) *size = total;
  return h.hex();
}

}  // namespace eg::store
