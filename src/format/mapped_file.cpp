#include "format/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "core/error.h"

namespace eg {

namespace {

// Closes a file descriptor on scope exit (the mapping stays valid after close).
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

// Live mappings (base -> size), for release_pages. Never destroyed: a MappedFile held by another
// static (a test's model cache) may be closed during static destruction, after this map would be.
std::mutex g_maps_mu;
std::map<const uint8_t*, size_t>& live_maps() {
  static auto* m = new std::map<const uint8_t*, size_t>();
  return *m;
}

[[noreturn]] void fail(const std::string& path, const std::string& reason) {
  throw Error("cannot open " + path + ": " + reason);
}

}  // namespace

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not block; it has no effect on regular files.
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) fail(path, std::strerror(errno));
  FdGuard guard{fd};

  struct stat st;
  if (::fstat(fd, &st) != 0) fail(path, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail(path, std::strerror(EISDIR));
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  if (st.st_size < 0) fail(path, "invalid file size");

  std::shared_ptr<MappedFile> mf(new MappedFile());
  mf->path_ = path;
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) return mf;  // mmap of length 0 is invalid; an empty file maps to nullptr

  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) fail(path, std::string("mmap failed: ") + std::strerror(errno));
  mf->data_ = static_cast<const uint8_t*>(p);
  mf->size_ = size;
  {
    std::lock_guard<std::mutex> lock(g_maps_mu);
    live_maps()[mf->data_] = size;
  }
  return mf;
}

MappedFile::~MappedFile() {
  if (data_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(g_maps_mu);
    live_maps().erase(data_);
  }
  ::munmap(const_cast<uint8_t*>(data_), size_);
}

size_t MappedFile::release_pages(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  std::lock_guard<std::mutex> lock(g_maps_mu);
  auto& m = live_maps();
  auto it = m.upper_bound(b);
  if (it == m.begin()) return 0;
  --it;
  if (b < it->first || b + n > it->first + it->second) return 0;  // not wholly inside this mapping
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(b) + page - 1) / page * page;
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(b) + n) / page * page;
  if (hi <= lo) return 0;
  if (::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED) != 0) return 0;
  return hi - lo;
}

}  // namespace eg
