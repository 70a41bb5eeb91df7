// Read-only memory mapping of a whole file (POSIX mmap). Weights are used in place from the
// mapping; nothing copies a whole checkpoint into memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace eg {

class MappedFile {
 public:
  /// Maps `path` read-only. Throws eg::Error ("cannot open <path>: <reason>") on failure.
  /// An empty file maps to data()==nullptr, size()==0.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  /// Drops the resident pages that lie wholly inside [p, p + n) when that range is inside a live
  /// mapping made by open() (madvise MADV_DONTNEED: the pages are clean file pages, so a later
  /// read brings them back from the file; nothing is lost). Returns the bytes released (0 when
  /// the range is not in a mapping, e.g. heap memory, which is never touched).
  static size_t release_pages(const void* p, size_t n);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace eg
