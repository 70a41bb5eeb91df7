#include "format/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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
  return mf;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace eg
