// libFuzzer target for the mmproj loader (open_mmproj: the GGUF reader, the clip.* keys, the
// tower configs and geometry checks, the tensor-name mapping and the inverted converter
// transforms of Gemma 3 and Gemma 4 mmproj files), built by scripts/fuzz (docs/reliability.md).
//
// Input: the head of an mmproj GGUF (header, metadata, tensor table). The harness appends 4 MiB
// of 0x3c bytes as the tensor data (positive, finite values in every dtype: the loader checks
// e.g. that per_dim_scale's stored softplus is positive), so a mutated head that still describes a whole file reaches
// the tensor checks and the transforms (the fixtures' data sections are up to 3.3 MB). Seeds
// (EG_FUZZ_WRITE_SEEDS): the heads (up to the data offset) of mmproj files written by
// write_mmproj from the tiny vision fixtures (tiny-gemma3-vision: gemma3; tiny-gemma4-mm:
// gemma4v + gemma4a, q8_0).
//
// Checks on every accepted file, independently of the loader's bookkeeping: at least one tower;
// the projector types match the towers; every tensor of the store has positive extents (0-d:
// one value), nbytes == dtype_row_bytes(last dim) · the other dims, and its bytes are all
// read (so ASan sees any out-of-bounds view); the vision tower is not empty and a Gemma 3
// geometry the loader accepted divides (image size by patch size). Any eg::Error is an expected
// rejection; anything else is a bug.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "format/gguf.h"
#include "fuzz_util.h"
#include "model/mmproj.h"

namespace {

void check(bool ok, const std::string& what) {
  if (!ok) egfuzz::fail("mmproj_fuzz", what);
}

constexpr size_t kPad = 4u << 20;  // bytes appended to every input (the tensor data)

void write_seeds(const std::string& dir) {
  const std::string tmp = std::filesystem::temp_directory_path() / "mmproj-fuzz-seed.gguf";
  for (const char* m : {"tiny-gemma3-vision", "tiny-gemma4-mm"}) {
    eg::MmprojWriteOptions o;
    o.type = "q8_0";
    eg::write_mmproj(egfuzz::shared_dir() + "/models/" + m, tmp, o);
    const std::string all = egfuzz::read_text(tmp);
    auto g = eg::GGUFFile::parse(reinterpret_cast<const uint8_t*>(all.data()), all.size(), m);
    check(all.size() - g->data_offset() <= kPad, "a seed's tensor data is larger than the padding");
    egfuzz::write_seed(dir, m, std::string_view(all).substr(0, g->data_offset()));
  }
  std::filesystem::remove(tmp);
}

egfuzz::MemFile& file() {
  static egfuzz::MemFile f("mmproj-fuzz");
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  egfuzz::maybe_write_seeds(write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::string buf;
  buf.assign(reinterpret_cast<const char*>(data), size);
  buf.append(kPad, '\x3c');  // f16 1.06, f32 0.0115, int8 60: positive, finite
  file().set(buf);
  eg::Mmproj m;
  try {
    m = eg::open_mmproj(file().path());
  } catch (const eg::Error& e) {
    if (std::getenv("EG_MMPROJ_FUZZ_SHOW")) std::fprintf(stderr, "rejected: %s\n", e.what());
    return 0;
  }
  check(m.has_vision || m.has_audio, "accepted a file without a tower");
  check(m.has_vision == !m.projector_type.empty(), "vision projector type without a vision tower (or the reverse)");
  check(m.has_audio == !m.audio_projector_type.empty(), "audio projector type without an audio tower (or the reverse)");
  if (m.has_vision) {
    check(m.vision.patch_size > 0 && m.vision.hidden > 0 && m.vision.layers > 0, "accepted an empty vision tower");
    if (m.vision.kind == eg::vision::TowerKind::Siglip)
      check(m.vision.image_size > 0 && m.vision.image_size % m.vision.patch_size == 0,
            "accepted a Gemma 3 geometry that does not divide");
  }
  unsigned sum = 0;
  for (const std::string& n : m.store.names()) {
    const eg::TensorInfo* t = m.store.find(n);
    check(t != nullptr, "a listed tensor cannot be found: " + n);
    uint64_t nb = 1;  // a 0-d tensor (the clip bounds, as transformers keeps them) holds one value
    for (size_t d = 0; d < t->shape.size(); ++d) {
      check(t->shape[d] > 0, "a tensor with an empty extent: " + n);
      if (d + 1 < t->shape.size()) nb *= static_cast<uint64_t>(t->shape[d]);
    }
    nb *= eg::dtype_row_bytes(t->dtype, t->shape.empty() ? 1 : t->shape.back());
    check(nb == t->nbytes, "nbytes does not match the shape: " + n);
    for (size_t i = 0; i < t->nbytes; ++i) sum += t->data[i];
  }
  if (sum == 0xdeadbeef) std::fputc(' ', stderr);  // keep the reads
  static const bool show = std::getenv("EG_MMPROJ_FUZZ_SHOW") != nullptr;  // which inputs load
  if (show) std::fprintf(stderr, "accepted: %s%s, %zu tensors\n", m.projector_type.c_str(),
                         m.has_audio ? " + audio" : "", m.store.names().size());
  return 0;
}
