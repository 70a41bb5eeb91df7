// libFuzzer target for the safetensors reader (TensorStore::open_file) and the sharded index
// reader (TensorStore::open_dir), built by scripts/fuzz (docs/reliability.md). Seeds
// (EG_FUZZ_WRITE_SEEDS): a small valid file (mode byte 0) and a small index (mode byte 1).
//
// Input: first byte selects the mode; the rest is the file content.
//   even: a .safetensors file, opened with open_file. A successful load is checked against an
//         independent parse of the header: every tensor lies inside the data buffer, at the
//         offsets of the header, with nbytes == numel * dtype size.
//   odd:  a model.safetensors.index.json next to a fixed valid shard "shard.safetensors"
//         (tensors "t" and "u"), opened with open_dir.
// Any eg::Error is an expected rejection; anything else (crash, sanitizer report, other
// exception, failed check) is a bug.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "format/safetensors.h"
#include "fuzz_util.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "safetensors_fuzz: check failed: %s\n", what);
    std::abort();
  }
}

std::string g_dir;        // scratch directory holding the index and the shard
std::string g_file_path;  // path of the in-memory file for mode "file"
int g_memfd = -1;

void setup() {
  if (!g_dir.empty()) return;
  char tmpl[] = "/tmp/safetensors-fuzz-XXXXXX";
  check(mkdtemp(tmpl) != nullptr, "mkdtemp");
  g_dir = tmpl;
  const float t[2] = {1.0f, 2.0f};
  const uint16_t u[3] = {1, 2, 3};
  eg::write_safetensors(g_dir + "/shard.safetensors",
                        {{"t", eg::DType::F32, {2}, t}, {"u", eg::DType::BF16, {3}, u}});
  // The file under test lives in memory (no disk I/O per input); open_file reopens it by path.
  g_memfd = memfd_create("safetensors-fuzz", MFD_CLOEXEC);
  check(g_memfd >= 0, "memfd_create");
  g_file_path = "/proc/self/fd/" + std::to_string(g_memfd);
  std::atexit([] { std::filesystem::remove_all(g_dir); });
}

void set_file(const uint8_t* data, size_t size) {
  check(ftruncate(g_memfd, 0) == 0, "ftruncate");
  size_t done = 0;
  while (done < size) {
    const ssize_t k = pwrite(g_memfd, data + done, size - done, static_cast<off_t>(done));
    check(k > 0, "pwrite");
    done += static_cast<size_t>(k);
  }
}

void fuzz_file(const uint8_t* data, size_t size) {
  set_file(data, size);
  eg::TensorStore st;
  try {
    st = eg::TensorStore::open_file(g_file_path);
  } catch (const eg::Error&) {
    return;
  }
  // Loaded: verify against an independent reading of the header.
  check(size >= 8, "loaded a file shorter than 8 bytes");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  check(n <= size - 8, "header length beyond file");
  const nlohmann::json h = nlohmann::json::parse(data + 8, data + 8 + n);
  check(h.is_object(), "header not an object");
  const uint64_t data_size = size - 8 - n;
  const uint8_t* base = nullptr;
  size_t count = 0;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    ++count;
    const eg::TensorInfo* t = st.find(it.key());
    check(t != nullptr, "tensor in header not in store");
    const uint64_t b = it.value().at("data_offsets").at(0).get<uint64_t>();
    const uint64_t e = it.value().at("data_offsets").at(1).get<uint64_t>();
    check(b <= e && e <= data_size, "offsets outside the data buffer");
    check(t->nbytes == e - b, "nbytes != end - begin");
    check(t->nbytes == static_cast<uint64_t>(t->numel()) * eg::dtype_size(t->dtype),
          "nbytes != numel * dtype size");
    if (base == nullptr) base = t->data - b;
    check(t->data == base + b, "data pointer not at its offset");
    check(t->nbytes == 0 || std::memcmp(t->data, data + 8 + n + b, t->nbytes) == 0,
          "data differs from the file");
  }
  check(st.names().size() == count, "store has tensors the header does not list");
  size_t total = 0;
  for (const auto& name : st.names()) total += st.find(name)->nbytes;
  check(total == st.total_bytes(), "total_bytes");
}

void fuzz_index(const uint8_t* data, size_t size) {
  const std::string index = g_dir + "/model.safetensors.index.json";
  FILE* f = std::fopen(index.c_str(), "wb");
  check(f != nullptr, "fopen index");
  check(size == 0 || std::fwrite(data, 1, size, f) == size, "fwrite index");
  std::fclose(f);
  try {
    const eg::TensorStore st = eg::TensorStore::open_dir(g_dir);
    // The only loadable shard holds exactly t and u.
    check(st.names().size() == 2 && st.find("t") && st.find("u"), "index store content");
  } catch (const eg::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  egfuzz::maybe_write_seeds([](const std::string& dir) {
    const std::string header = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"a":"b"}})";
    std::string file(1, '\0');
    const uint64_t n = header.size();
    file.append(reinterpret_cast<const char*>(&n), 8);
    file += header + std::string(8, '\0');
    egfuzz::write_seed(dir, "file", file);
    egfuzz::write_seed(dir, "index", "\1{\"weight_map\":{\"t\":\"shard.safetensors\",\"u\":\"shard.safetensors\"}}");
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  setup();
  if (size == 0) return 0;
  if ((data[0] & 1) == 0)
    fuzz_file(data + 1, size - 1);
  else
    fuzz_index(data + 1, size - 1);
  return 0;
}
