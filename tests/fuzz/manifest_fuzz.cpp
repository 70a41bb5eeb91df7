// libFuzzer target: the model store's manifest and pointer files (src/store/manifest.h:
// parse_manifest, parse_pointers), docs/model-store.md, docs/reliability.md. Built by scripts/fuzz.
//
// Input: a manifest's JSON text, optionally followed by a NUL byte and a pointer file's text.
// Checks on an accepted manifest the properties the store relies on: valid name and version, a
// known format, at least one file, file names that stay inside the version's folder (no '/', no
// leading '.'), 64-hex digests, paths sorted and unique, a gguf version with exactly one file;
// manifest_to_json then parse_manifest gives the same manifest (the same JSON); id() is 64 hex.
// An accepted pointer file names valid versions and survives the round trip.
// Seeds (EG_FUZZ_WRITE_SEEDS): manifests and pointer files of the tiny fixtures as the store writes them.
#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "fuzz_util.h"
#include "store/manifest.h"
#include "store/sha256.h"

namespace {

using namespace eg::store;

void check(bool ok, const std::string& what) {
  if (!ok) egfuzz::fail("manifest_fuzz", what);
}

void write_seeds(const std::string& dir) {
  namespace fs = std::filesystem;
  int k = 0;
  for (const std::string name : {"tiny-gemma3", "tiny-gemma2", "tiny-gemma4"}) {
    Manifest m;
    m.name = name;
    m.version = "v" + std::to_string(k + 1);
    m.format = "hf";
    m.architecture = "Gemma3ForCausalLM";
    m.quantization = "bfloat16";
    m.created = "2026-12-01T17:00:00Z";
    m.provenance = "added from /models/" + name;
    const fs::path d = fs::path(egfuzz::shared_dir()) / "models" / name;
    for (const auto& e : fs::directory_iterator(d))
      if (e.is_regular_file() && e.file_size() < (1 << 20))
        m.files.push_back({e.path().filename().string(), sha256_hex(egfuzz::read_text(e.path().string())), e.file_size()});
    std::sort(m.files.begin(), m.files.end(), [](const FileEntry& a, const FileEntry& b) { return a.path < b.path; });
    if (m.files.empty()) continue;
    m.tokenizer_digest = m.files[0].sha256;
    const std::string ptr = pointers_to_json({m.version, k ? "v" + std::to_string(k) : ""});
    egfuzz::write_seed(dir, "manifest-" + std::to_string(k), manifest_to_json(m) + std::string(1, '\0') + ptr);
    Manifest g = m;
    g.format = "gguf";
    g.files.resize(1);
    g.files[0].path = name + ".gguf";
    egfuzz::write_seed(dir, "gguf-" + std::to_string(k++), manifest_to_json(g));
  }
}

bool safe_file_name(const std::string& s) {
  return !s.empty() && s[0] != '.' && s.find('/') == std::string::npos && s.find('\0') == std::string::npos;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  egfuzz::maybe_write_seeds(write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const auto [man, ptr] = egfuzz::split(in, std::string_view("\0", 1));
  try {
    const Manifest m = parse_manifest(man, "m.json");
    check(is_valid_name(m.name) && is_valid_name(m.version), "names");
    check(m.format == "hf" || m.format == "gguf", "format");
    check(!m.files.empty(), "files");
    check(m.format != "gguf" || m.files.size() == 1, "gguf has one file");
    for (size_t i = 0; i < m.files.size(); ++i) {
      check(safe_file_name(m.files[i].path), "file name escapes the version folder");
      check(is_sha256_hex(m.files[i].sha256), "digest");
      check(i == 0 || m.files[i - 1].path < m.files[i].path, "sorted unique paths");
    }
    check(is_sha256_hex(m.id()), "id");
    const std::string text = manifest_to_json(m);
    const Manifest back = parse_manifest(text, "m.json");
    check(manifest_to_json(back) == text, "round trip");
  } catch (const eg::Error&) {
  }
  try {
    const Pointers p = parse_pointers(ptr, "r.json");
    check(p.current.empty() || is_valid_name(p.current), "current");
    check(p.previous.empty() || is_valid_name(p.previous), "previous");
    const Pointers back = parse_pointers(pointers_to_json(p), "r.json");
    check(back.current == p.current && back.previous == p.previous, "pointer round trip");
  } catch (const eg::Error&) {
  }
  return 0;
}
