// Helpers shared by the libFuzzer targets of tests/fuzz (docs/reliability.md).
//
// Every target follows one rule: an eg::Error (or, for the server, an ApiError with a 4xx status)
// is an expected rejection; anything else — a crash, a sanitizer report, another exception, a
// failed check() — is a bug and aborts.
//
// Seeds: a target that needs seeds the fixtures cannot give as they are (small tokenizer files,
// session files saved by this build) writes them when the environment variable
// EG_FUZZ_WRITE_SEEDS names a folder: LLVMFuzzerInitialize calls write_seeds(dir) and exits.
// scripts/fuzz does that into build-fuzz/corpus/<target>/ before the first run.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

namespace egfuzz {

[[noreturn]] inline void fail(const char* target, const std::string& what) {
  std::fprintf(stderr, "%s: check failed: %s\n", target, what.c_str());
  std::abort();
}

inline std::string shared_dir() {
  const char* e = std::getenv("EDGEGEMMA_SHARED_DIR");
  return e && *e ? std::string(e) : std::string(EG_SHARED_DIR);
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "fuzz: cannot read %s\n", path.c_str());
    std::exit(2);
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline void write_seed(const std::string& dir, const std::string& name, std::string_view bytes) {
  std::filesystem::create_directories(dir);
  std::ofstream f(dir + "/" + name, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// `data` split at the first occurrence of `sep` (the second part is empty when there is none).
inline std::pair<std::string_view, std::string_view> split(std::string_view data, std::string_view sep) {
  const size_t p = data.find(sep);
  if (p == std::string_view::npos) return {data, {}};
  return {data.substr(0, p), data.substr(p + sep.size())};
}

/// A file in memory (memfd) with a path, for parsers that only read files by name.
class MemFile {
 public:
  explicit MemFile(const char* name) {
    fd_ = memfd_create(name, MFD_CLOEXEC);
    if (fd_ < 0) fail("MemFile", "memfd_create");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  const std::string& path() const { return path_; }
  void set(std::string_view bytes) {
    if (ftruncate(fd_, 0) != 0) fail("MemFile", "ftruncate");
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t k = pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
      if (k <= 0) fail("MemFile", "pwrite");
      done += static_cast<size_t>(k);
    }
  }

 private:
  int fd_ = -1;
  std::string path_;
};

/// Calls write_seeds(dir) and exits when EG_FUZZ_WRITE_SEEDS is set (see the header comment).
template <class F>
void maybe_write_seeds(F write_seeds) {
  const char* dir = std::getenv("EG_FUZZ_WRITE_SEEDS");
  if (dir == nullptr || *dir == '\0') return;
  std::filesystem::create_directories(dir);
  write_seeds(std::string(dir));
  std::exit(0);
}

}  // namespace egfuzz
