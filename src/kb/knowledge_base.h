// The local knowledge base: one SQLite file (docs/knowledge-base.md has the schema) holding files,
// their chunks (text, offset, SHA-256, an embedding vector or NULL), an FTS5 index of the chunks
// (BM25) and FAQ pairs (faq.h).
//
// Vectors: float32 BLOBs made by one embedding model, whose path, digest (Embedder::model_digest)
// and dimension are recorded in `meta`; vectors of another model are never mixed in (use_embedder
// refuses; reembed() replaces every vector). A base built without a model is BM25-only.
// Search: BM25 (FTS5 bm25()) and an exact cosine scan over the vectors (vector_scan.h), each
// taking `candidates` results, fused by reciprocal rank (fusion.h, k = 60).
//
// Safety: every file is added in one transaction (BEGIN IMMEDIATE ... COMMIT): an interrupted add
// leaves the base as it was before that file. Open checks the schema version (PRAGMA
// user_version) and runs PRAGMA quick_check: a damaged file is a clear eg::Error. A base locked by
// another writer waits busy_timeout_ms, then is an eg::Error. Thread-safe (one mutex).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "embed/embedder.h"
#include "kb/chunker.h"
#include "kb/sqlite_db.h"
#include "kb/text_extract.h"

namespace eg::kb {

inline constexpr int kSchemaVersion = 1;

struct KbOpenOptions {
  bool create = false;      // create the file (and the schema) when missing
  bool read_only = false;
  int busy_timeout_ms = 5000;
  bool check_integrity = true;  // PRAGMA quick_check on open
};

struct KbInfo {
  std::string path;
  int schema_version = 0;
  int64_t files = 0, chunks = 0, vectors = 0, faq = 0;
  int64_t text_bytes = 0;
  std::string model_path, model_digest;  // "" for a BM25-only base
  int dim = 0;
  ChunkOptions chunking;
};

struct AddOptions {
  ChunkOptions chunking;    // used when the base is created; later adds use the recorded ones
  ExtractOptions extract;
  int embed_batch = 16;
  /// Called inside the file's transaction after each chunk is written (progress; tests use it to
  /// kill an add halfway).
  std::function<void(size_t done, size_t total)> on_chunk;
};

struct AddResult {
  enum class Status { Added, Updated, Unchanged } status = Status::Added;
  size_t chunks = 0;
  size_t embedded = 0;  // chunks embedded now
  size_t reused = 0;    // vectors kept from the file's previous version (same chunk hash)
};

struct SearchOptions {
  int k = 5;
  int candidates = 50;   // taken from each of BM25 and the vector scan before fusion
  bool lexical = true;   // BM25
  bool vectors = true;   // cosine scan (needs an embedder and a base with vectors)
};

struct SearchHit {
  int64_t chunk_id = 0;
  std::string source;   // the file's path as stored
  uint64_t offset = 0, length = 0;
  std::string text;
  double score = 0;     // RRF score
  int bm25_rank = 0;    // 1-based; 0: not in the BM25 list
  double bm25 = 0;      // FTS5 bm25() (lower is better)
  int vector_rank = 0;  // 1-based; 0: not in the vector list
  double cosine = 0;
};

class KnowledgeBase {
 public:
  static std::unique_ptr<KnowledgeBase> open(const std::string& path, const KbOpenOptions& o = {});
  ~KnowledgeBase();

  /// Sets the embedder used by add / search (nullptr: none). Throws eg::Error when the base's
  /// vectors come from another model (digest or dimension differ): "use kb reembed". A base with
  /// chunks but no vectors accepts only reembed(). `replacing`: no check (for reembed()).
  void use_embedder(embed::Embedder* e, const std::string& model_path, bool replacing = false);
  embed::Embedder* embedder() const { return embedder_; }

  /// Adds or updates one file (text extraction, chunking, embedding, one transaction). A file
  /// whose content hash is unchanged is a no-op (Status::Unchanged).
  AddResult add_file(const std::string& path, const AddOptions& o = {});
  /// Removes a file, or every file under a folder; returns how many. Paths as add_file takes them.
  int remove(const std::string& path);
  /// Records the current embedder's model in a base that has none and no content yet (the FAQ
  /// does this before its first pair); a base with content but no vectors is an eg::Error
  /// (reembed). No-op without an embedder or when a model is recorded.
  void record_model();
  /// Embeds every chunk with the current embedder and records its model (one transaction).
  size_t reembed(int batch = 16);
  KbInfo info();
  std::vector<SearchHit> search(const std::string& query, const SearchOptions& o = {});

  Db& db() { return *db_; }
  std::mutex& mutex() { return mu_; }
  /// The form in which paths are stored: absolute, lexically normalised.
  static std::string normalize_path(const std::string& path);
  /// The embedding task name for queries / documents: "query" / "document" when the embedder
  /// defines them, else "" (its default).
  static std::string task_for(const embed::Embedder& e, bool query);
  /// Embeds texts with `e` in batches; each vector checked to be `dim` long (0: e's).
  static std::vector<std::vector<float>> embed_all(embed::Embedder& e, const std::vector<std::string>& texts,
                                                   bool query, int batch);

 private:
  explicit KnowledgeBase(std::unique_ptr<Db> db);
  std::string meta(const std::string& key);
  void set_meta(const std::string& key, const std::string& value);
  void load_vectors();

  std::unique_ptr<Db> db_;
  std::mutex mu_;
  embed::Embedder* embedder_ = nullptr;
  std::string embedder_path_;
  // The vectors, cached for search; reloaded when the database changed (data_version / changes).
  std::vector<float> matrix_;
  std::vector<int64_t> matrix_ids_;
  int matrix_dim_ = 0;
  int64_t matrix_stamp_ = -1;
};

}  // namespace eg::kb
