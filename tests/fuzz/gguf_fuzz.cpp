// libFuzzer target for the GGUF reader (GGUFFile::parse: header, metadata, tensor table), built by
// scripts/fuzz (docs/reliability.md). Seeds (EG_FUZZ_WRITE_SEEDS): the first 8 KiB of each fixture
// GGUF (the header part is what matters).
//
// Checks on every accepted file (independently of the parser's own bookkeeping): each tensor's
// bytes lie inside the buffer, after the data offset, at an aligned offset, with
// nbytes == dtype_row_bytes(ne0) * ne1 * ne2 * ne3; every byte of every tensor is read (so ASan
// sees any out-of-bounds view). Any eg::Error is an expected rejection; anything else is a bug.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <filesystem>

#include "core/error.h"
#include "format/gguf.h"
#include "fuzz_util.h"

namespace {

void write_seeds(const std::string& dir) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(egfuzz::shared_dir() + "/models/gguf")) {
    if (e.path().extension() != ".gguf") continue;
    const std::string head = egfuzz::read_text(e.path().string()).substr(0, 8192);
    egfuzz::write_seed(dir, e.path().stem().string(), head);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  egfuzz::maybe_write_seeds(write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Copy into an exactly-sized heap buffer so ASan catches reads past the end.
  uint8_t* buf = static_cast<uint8_t*>(std::malloc(size ? size : 1));
  if (size) std::memcpy(buf, data, size);
  try {
    auto g = eg::GGUFFile::parse(buf, size, "fuzz.gguf");
    unsigned sum = 0;
    for (const eg::GGUFTensor& t : g->tensors()) {
      if (t.ne.empty() || t.ne.size() > 4) std::abort();
      uint64_t nb = eg::dtype_row_bytes(t.dtype, t.ne[0]);
      for (size_t d = 1; d < t.ne.size(); ++d) nb *= static_cast<uint64_t>(t.ne[d]);
      if (nb != t.nbytes) std::abort();
      if (t.offset % g->alignment() != 0) std::abort();
      if (t.data < buf + g->data_offset() || t.data + t.nbytes > buf + size) std::abort();
      for (size_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
    }
    for (const auto& [k, v] : g->metadata()) sum += static_cast<unsigned>(k.size() + v.array_size());
    if (sum == 0xdeadbeef) std::fputc(' ', stderr);  // keep the reads
  } catch (const eg::Error&) {
  }
  std::free(buf);
  return 0;
}
