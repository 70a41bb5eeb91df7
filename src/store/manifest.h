// One model version of the store: its manifest (docs/model-store.md, "Manifest") and the pointer
// file of a model name (current / previous version). JSON via nlohmann.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace eg::store {

/// One file of a version: its path inside the model (a plain file name: "config.json",
/// "model.safetensors", "tiny.gguf"), SHA-256 (hex) and size in bytes.
struct FileEntry {
  std::string path;
  std::string sha256;
  uint64_t size = 0;
};

struct Manifest {
  static constexpr int kSchema = 1;
  std::string name;            // model name (is_valid_name)
  std::string version;         // version tag (is_valid_name)
  std::string format;          // "hf" (a Hugging Face folder) or "gguf" (one .gguf file)
  std::string architecture;    // config.json architectures[0] / model_type, or GGUF general.architecture
  std::string quantization;    // weights' dtype: config.json torch_dtype ("bfloat16"), or the GGUF's
                               // dominant tensor type by bytes ("q4_0")
  std::string tokenizer_digest;  // sha256 hex of tokenizer.json, or of the GGUF (tokenizer inside)
  std::string created;         // UTC, ISO 8601 ("2026-12-01T17:00:00Z")
  std::string provenance;      // free text ("added from /path by edgegemma models add")
  std::vector<FileEntry> files;  // sorted by path, at least one, unique paths

  /// The version's content id: for "gguf" the file's SHA-256, for "hf" the SHA-256 of the lines
  /// "<sha256>  <path>\n" (sha256sum's format) over the files in path order. Independent of name,
  /// version tag, time and provenance: the same bytes added twice have the same id.
  std::string id() const;
  uint64_t total_bytes() const;
};

/// Model names and version tags: 1..128 characters of [A-Za-z0-9._-], not starting with '.' or
/// '-', and not "sha256" (reserved for digest references).
bool is_valid_name(std::string_view s);
/// A file path inside a model: a valid name (no '/', so no escape from the version's folder).
bool is_valid_file_name(std::string_view s);

/// Manifest -> JSON text (pretty, trailing newline).
std::string manifest_to_json(const Manifest& m);
/// JSON text -> Manifest, validating every field (types, names, hex digests, sorted unique paths,
/// format). Throws eg::Error "<origin>: ..." on any defect; never anything else.
Manifest parse_manifest(std::string_view text, const std::string& origin);

/// The pointer file of a model name: the current version and the one before it ("" = none).
struct Pointers {
  std::string current;
  std::string previous;
};
std::string pointers_to_json(const Pointers& p);
/// Throws eg::Error "<origin>: ..." for bad JSON or bad version names.
Pointers parse_pointers(std::string_view text, const std::string& origin);

}  // namespace eg::store
