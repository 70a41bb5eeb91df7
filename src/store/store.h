// The content-addressed model store (docs/model-store.md): blobs by SHA-256, a manifest per model
// version, per model name a current and a previous pointer.
//
// Layout under the root (default ~/.local/share/edgegemma/models; EDGEGEMMA_STORE; --store):
//   lock                            flock(2) file: changes hold it exclusively (lock.h)
//   blobs/sha256/<64 hex>           file contents, read-only, shared by every version using them
//   manifests/<name>/<version>.json one manifest per version (manifest.h); its presence is what
//                                   makes a version exist
//   trees/<name>/<version>/<file>   hard links to the blobs under the model's file names: the path
//                                   the engine loads (a folder, or the folder's one .gguf file)
//   refs/<name>.json                {"current": V, "previous": W}: both pointers in one file, so
//                                   they change together atomically
//   tmp/                            files being written; anything left there is garbage
// Crash safety: every manifest and pointer change is durable.h's atomic_write; blobs and trees
// are complete before they are renamed into place; a version appears only when its manifest does
// and disappears when it is unlinked. So a store interrupted at any point is consistent (verify())
// with at most garbage left (gc()). Readers (resolve, serve) take no lock: they read whole files.
//
// Errors: every bad input (unknown name, bad reference, corrupt file, failed smoke test) throws
// eg::Error with one line; the store is then unchanged (at most garbage in tmp/ or blobs/).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "store/manifest.h"

namespace eg::store {

struct AddOptions {
  std::string name;          // required, is_valid_name
  std::string version;       // "" = "v<N>", the first unused N >= number of versions + 1
  std::string provenance;    // "" = "added from <absolute source path>"
  bool hard_link = false;    // link the source files instead of copying (same file system only;
                             // falls back to copying). The blobs then share the source's inode:
                             // editing the source corrupts the store (verify() reports it).
  bool make_current = true;  // move `current` to the new version (always when the name has none)
  bool smoke = true;         // run the smoke generation (model_check.h) before the manifest
  std::string expect_id;     // "" or the id (Manifest::id, 64 hex, "sha256:" optional) the
                             // version must have, e.g. the digest the app downloaded against:
                             // anything else is refused before the checks
};

/// One problem or leftover found by verify().
struct VerifyReport {
  bool consistent = true;              // no errors
  std::vector<std::string> errors;     // corruption: missing/short/altered blobs, bad manifests,
                                       // dangling pointers, trees not linking their blobs
  std::vector<std::string> garbage;    // leftovers gc() removes (unreferenced blobs, temp files,
                                       // trees without a manifest); not an inconsistency
  int versions = 0;                    // versions checked
  uint64_t bytes_hashed = 0;
};

struct GcReport {
  uint64_t bytes_freed = 0;
  int blobs = 0, trees = 0, temp = 0;  // entries removed
};

/// A version with its pointers' roles.
struct VersionInfo {
  Manifest manifest;
  bool current = false, previous = false;
};

class Store {
 public:
  /// The store at `root`; create: make the layout (when missing). Readers pass create = false and
  /// see an empty store when there is none.
  explicit Store(std::string root, bool create = true);
  /// $EDGEGEMMA_STORE, else $XDG_DATA_HOME/edgegemma/models, else ~/.local/share/edgegemma/models.
  static std::string default_root();
  const std::string& root() const { return root_; }

  /// Adds a Hugging Face folder (its top-level regular files, hidden ones skipped) or a .gguf
  /// file as a new version: copies (or links) each file into blobs/ hashing it on the way, builds
  /// the tree, parses the headers and runs the smoke generation, then writes the manifest and
  /// (make_current) moves the pointers. Throws eg::Error for an existing NAME:VERSION, a bad
  /// source or a failed check: then no manifest and no pointer changed.
  Manifest add(const std::string& src, const AddOptions& opt);
  /// Re-hashes, parses and smoke-tests NAME:VERSION, then makes it current (the old current
  /// becomes previous). Same version: nothing changes. Throws eg::Error (pointers untouched).
  Pointers use(const std::string& name, const std::string& version);
  /// Swaps current and previous after the same checks. Throws when there is no previous version.
  Pointers rollback(const std::string& name);
  /// Removes NAME:VERSION and the blobs no other manifest uses. The current version only with
  /// force (current then becomes previous, if any). Throws eg::Error.
  void remove(const std::string& name, const std::string& version, bool force);

  /// Model names with at least one version, sorted.
  std::vector<std::string> names() const;
  /// The versions of `name`, oldest first (by created time, then version tag).
  std::vector<VersionInfo> versions(const std::string& name) const;
  /// The pointers of `name` (empty when it has none).
  Pointers pointers(const std::string& name) const;
  /// Throws eg::Error "no model version NAME:VERSION in STORE" when absent.
  Manifest manifest(const std::string& name, const std::string& version) const;
  /// Resolves "NAME" (its current version), "NAME:VERSION" or "sha256:PREFIX" (a version whose
  /// id(), Manifest::id, starts with PREFIX, at least 6 hex digits, unique). Throws eg::Error.
  Manifest resolve(const std::string& ref) const;
  /// What the engine loads for a version: its tree folder ("hf") or the .gguf file in it.
  std::string model_path(const Manifest& m) const;

  /// The checks before a pointer moves: every file's size and SHA-256, the headers
  /// (model_check.h read_model_facts) and, with smoke, the smoke generation. Throws eg::Error.
  void check_version(const Manifest& m, bool smoke) const;
  /// Checks the whole store (name "": every model and the leftovers) or one model: parses every
  /// manifest and pointer file, re-hashes every blob used, checks the trees link the blobs.
  VerifyReport verify(const std::string& name = "") const;
  /// Removes unreferenced blobs, trees without a manifest and temp files.
  GcReport gc();

  std::string blob_path(const std::string& sha256) const;
  std::string manifest_path(const std::string& name, const std::string& version) const;
  std::string tree_path(const std::string& name, const std::string& version) const;
  std::string refs_path(const std::string& name) const;

 private:
  void make_layout() const;
  void write_pointers(const std::string& name, const Pointers& p, const char* step) const;
  std::vector<Manifest> all_manifests(std::vector<std::string>* errors) const;
  std::string root_;
};

/// True when `s` has the syntax of a store reference (NAME, NAME:VERSION or sha256:HEX).
bool is_reference(const std::string& s);

}  // namespace eg::store
