#include "kb/knowledge_base.h"

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <unordered_map>

#include "core/error.h"
#include "kb/fusion.h"
#include "kb/schema.h"
#include "core/sha256.h"
#include "kb/vector_scan.h"

namespace eg::kb {

namespace {

std::string short_digest(const std::string& d) { return d.size() > 12 ? d.substr(0, 12) : d; }

int to_int(const std::string& s, int fallback) {
  try {
    return s.empty() ? fallback : std::stoi(s);
  } catch (const std::exception&) {
    return fallback;
  }
}

}  // namespace

KnowledgeBase::KnowledgeBase(std::unique_ptr<Db> db) : db_(std::move(db)) {}
KnowledgeBase::~KnowledgeBase() = default;

std::unique_ptr<KnowledgeBase> KnowledgeBase::open(const std::string& path, const KbOpenOptions& o) {
  Db::OpenOptions dbo;
  dbo.create = o.create;
  dbo.read_only = o.read_only;
  dbo.busy_timeout_ms = o.busy_timeout_ms;
  auto db = std::make_unique<Db>(path, dbo);
  // The first statements read the header: a file that is not SQLite fails here, clearly.
  if (!o.read_only) db->exec("PRAGMA journal_mode = WAL");
  db->exec("PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL");
  prepare_schema(*db, o.create && !o.read_only, o.check_integrity);
  return std::unique_ptr<KnowledgeBase>(new KnowledgeBase(std::move(db)));
}

std::string KnowledgeBase::normalize_path(const std::string& path) {
  return std::filesystem::absolute(std::filesystem::path(path)).lexically_normal().string();
}

std::string KnowledgeBase::task_for(const embed::Embedder& e, bool query) {
  const std::string want = query ? "query" : "document";
  const auto names = e.task_names();
  return std::find(names.begin(), names.end(), want) != names.end() ? want : "";
}

std::vector<std::vector<float>> KnowledgeBase::embed_all(embed::Embedder& e, const std::vector<std::string>& texts,
                                                         bool query, int batch) {
  embed::EmbedOptions eo;
  eo.task = task_for(e, query);
  std::vector<std::vector<float>> out;
  out.reserve(texts.size());
  const size_t b = static_cast<size_t>(std::max(1, batch));
  for (size_t i = 0; i < texts.size(); i += b) {
    std::vector<std::string> part(texts.begin() + static_cast<std::ptrdiff_t>(i),
                                  texts.begin() + static_cast<std::ptrdiff_t>(std::min(texts.size(), i + b)));
    auto embs = e.embed(part, eo);
    if (embs.size() != part.size()) throw Error("the embedding model returned " + std::to_string(embs.size()) +
                                                " vectors for " + std::to_string(part.size()) + " texts");
    for (auto& em : embs) {
      if (static_cast<int>(em.vector.size()) != e.full_dim())
        throw Error("the embedding model returned a vector of " + std::to_string(em.vector.size()) +
                    " values, not its dimension " + std::to_string(e.full_dim()));
      out.push_back(std::move(em.vector));
    }
  }
  return out;
}

std::string KnowledgeBase::meta(const std::string& key) {
  Stmt s = db_->prepare("SELECT value FROM meta WHERE key = ?1");
  s.bind(1, key);
  return s.step() ? s.col_text(0) : std::string();
}

void KnowledgeBase::set_meta(const std::string& key, const std::string& value) {
  Stmt s = db_->prepare("INSERT INTO meta(key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value");
  s.bind(1, key).bind(2, value).run();
}

void KnowledgeBase::use_embedder(embed::Embedder* e, const std::string& model_path, bool replacing) {
  std::lock_guard<std::mutex> lk(mu_);
  if (e && !replacing) {
    const std::string digest = meta("embed_digest");
    if (!digest.empty() && (digest != e->model_digest() || to_int(meta("embed_dim"), 0) != e->full_dim()))
      throw Error(db_->path() + ": its vectors were made by " + meta("embed_model") + " (digest " + short_digest(digest) +
                  ", dimension " + meta("embed_dim") + "), not by " + model_path + " (digest " +
                  short_digest(e->model_digest()) + ", dimension " + std::to_string(e->full_dim()) +
                  "); vectors of two models are never mixed: re-embed the base with `edgegemma kb reembed " +
                  db_->path() + " -m " + model_path + "`");
  }
  embedder_ = e;
  embedder_path_ = model_path;
}

AddResult KnowledgeBase::add_file(const std::string& path, const AddOptions& o) {
  std::lock_guard<std::mutex> lk(mu_);
  const std::string p = normalize_path(path);
  const Extracted x = extract_file(p, o.extract);
  const std::string digest = meta("embed_digest");
  if (!embedder_ && !digest.empty())
    throw Error(db_->path() + ": its chunks have vectors of " + meta("embed_model") +
                ": adding a file needs that model (-m)");
  if (embedder_ && digest.empty() && db_->query_int("SELECT count(*) FROM chunks") > 0)
    throw Error(db_->path() + ": a BM25-only base (its chunks have no vectors): run `edgegemma kb reembed " + db_->path() +
                " -m MODEL` before adding files with a model");
  ChunkOptions co = o.chunking;
  const std::string cb = meta("chunk_bytes");
  if (!cb.empty()) {
    co.chunk_bytes = to_int(cb, co.chunk_bytes);
    co.overlap_bytes = to_int(meta("chunk_overlap"), co.overlap_bytes);
  }

  int64_t file_id = 0;
  {
    Stmt s = db_->prepare("SELECT id, sha256 FROM files WHERE path = ?1");
    s.bind(1, p);
    if (s.step()) {
      file_id = s.col_int(0);
      if (s.col_text(1) == x.sha256) {
        AddResult r;
        r.status = AddResult::Status::Unchanged;
        r.chunks = static_cast<size_t>(db_->query_int("SELECT count(*) FROM chunks WHERE file_id = " + std::to_string(file_id)));
        return r;
      }
    }
  }
  const std::vector<Chunk> chunks = chunk_text(x.text, co);
  std::vector<std::string> texts, hashes;
  for (const Chunk& c : chunks) {
    texts.emplace_back(x.text.substr(c.offset, c.length));
    hashes.push_back(sha256_hex(texts.back()));
  }
  AddResult r;
  r.status = file_id ? AddResult::Status::Updated : AddResult::Status::Added;
  r.chunks = chunks.size();
  std::vector<std::vector<float>> vecs(chunks.size());
  if (embedder_) {
    std::unordered_map<std::string, std::vector<float>> old;  // the previous version's vectors by chunk hash
    if (file_id) {
      Stmt s = db_->prepare("SELECT sha256, vector FROM chunks WHERE file_id = ?1 AND vector IS NOT NULL");
      s.bind(1, file_id);
      while (s.step()) old.emplace(s.col_text(0), s.col_floats(1));
    }
    std::vector<std::string> todo;
    std::vector<size_t> where;
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (auto it = old.find(hashes[i]); it != old.end()) {
        vecs[i] = it->second;
        ++r.reused;
      } else {
        todo.push_back(texts[i]);
        where.push_back(i);
      }
    }
    auto fresh = embed_all(*embedder_, todo, false, o.embed_batch);
    for (size_t j = 0; j < fresh.size(); ++j) vecs[where[j]] = std::move(fresh[j]);
    r.embedded = fresh.size();
  }

  Transaction t(*db_);
  if (embedder_ && digest.empty()) {
    set_meta("embed_model", embedder_path_);
    set_meta("embed_digest", embedder_->model_digest());
    set_meta("embed_dim", std::to_string(embedder_->full_dim()));
  }
  if (cb.empty()) {
    set_meta("chunk_bytes", std::to_string(co.chunk_bytes));
    set_meta("chunk_overlap", std::to_string(co.overlap_bytes));
  }
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  if (file_id) {
    db_->prepare("DELETE FROM chunks WHERE file_id = ?1").bind(1, file_id).run();
    db_->prepare("UPDATE files SET sha256 = ?2, bytes = ?3, kind = ?4, added_at = ?5 WHERE id = ?1")
        .bind(1, file_id).bind(2, x.sha256).bind(3, static_cast<int64_t>(x.bytes)).bind(4, x.kind).bind(5, now).run();
  } else {
    db_->prepare("INSERT INTO files(path, sha256, bytes, kind, added_at) VALUES (?1, ?2, ?3, ?4, ?5)")
        .bind(1, p).bind(2, x.sha256).bind(3, static_cast<int64_t>(x.bytes)).bind(4, x.kind).bind(5, now).run();
    file_id = db_->last_insert_rowid();
  }
  Stmt ins = db_->prepare("INSERT INTO chunks(file_id, offset, length, sha256, text, vector) VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  for (size_t i = 0; i < chunks.size(); ++i) {
    ins.reset();
    ins.bind(1, file_id).bind(2, static_cast<int64_t>(chunks[i].offset)).bind(3, static_cast<int64_t>(chunks[i].length));
    ins.bind(4, hashes[i]).bind(5, texts[i]);
    if (vecs[i].empty()) ins.bind_null(6);
    else ins.bind_blob(6, vecs[i].data(), vecs[i].size() * sizeof(float));
    ins.run();
    if (o.on_chunk) o.on_chunk(i + 1, chunks.size());
  }
  t.commit();
  return r;
}

int KnowledgeBase::remove(const std::string& path) {
  std::lock_guard<std::mutex> lk(mu_);
  std::string p = normalize_path(path);
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  Transaction t(*db_);
  const char* where = "path = ?1 OR substr(path, 1, length(?1) + 1) = ?1 || '/'";
  db_->prepare(std::string("DELETE FROM chunks WHERE file_id IN (SELECT id FROM files WHERE ") + where + ")").bind(1, p).run();
  db_->prepare(std::string("DELETE FROM files WHERE ") + where).bind(1, p).run();
  const int n = db_->changes();
  t.commit();
  return n;
}

void KnowledgeBase::record_model() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!embedder_ || !meta("embed_digest").empty()) return;
  if (db_->query_int("SELECT (SELECT count(*) FROM chunks) + (SELECT count(*) FROM faq)") > 0)
    throw Error(db_->path() + ": a BM25-only base (no vectors): run `edgegemma kb reembed " + db_->path() +
                " -m MODEL` before adding with a model");
  Transaction t(*db_);
  set_meta("embed_model", embedder_path_);
  set_meta("embed_digest", embedder_->model_digest());
  set_meta("embed_dim", std::to_string(embedder_->full_dim()));
  t.commit();
}

size_t KnowledgeBase::reembed(int batch) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!embedder_) throw Error("kb reembed needs an embedding model (-m MODEL)");
  std::vector<int64_t> ids, faq_ids;
  std::vector<std::string> texts, questions;
  {
    Stmt s = db_->prepare("SELECT id, text FROM chunks ORDER BY id");
    while (s.step()) ids.push_back(s.col_int(0)), texts.push_back(s.col_text(1));
    Stmt f = db_->prepare("SELECT id, question FROM faq ORDER BY id");
    while (f.step()) faq_ids.push_back(f.col_int(0)), questions.push_back(f.col_text(1));
  }
  const auto vecs = embed_all(*embedder_, texts, false, batch);
  const auto qvecs = embed_all(*embedder_, questions, true, batch);
  Transaction t(*db_);
  Stmt up = db_->prepare("UPDATE chunks SET vector = ?2 WHERE id = ?1");
  for (size_t i = 0; i < ids.size(); ++i) {
    up.reset();
    up.bind(1, ids[i]).bind_blob(2, vecs[i].data(), vecs[i].size() * sizeof(float)).run();
  }
  Stmt fu = db_->prepare("UPDATE faq SET vector = ?2 WHERE id = ?1");
  for (size_t i = 0; i < faq_ids.size(); ++i) {
    fu.reset();
    fu.bind(1, faq_ids[i]).bind_blob(2, qvecs[i].data(), qvecs[i].size() * sizeof(float)).run();
  }
  set_meta("embed_model", embedder_path_);
  set_meta("embed_digest", embedder_->model_digest());
  set_meta("embed_dim", std::to_string(embedder_->full_dim()));
  t.commit();
  matrix_stamp_ = -1;
  return ids.size();
}

KbInfo KnowledgeBase::info() {
  std::lock_guard<std::mutex> lk(mu_);
  KbInfo i;
  i.path = db_->path();
  i.schema_version = static_cast<int>(db_->query_int("PRAGMA user_version"));
  i.files = db_->query_int("SELECT count(*) FROM files");
  i.chunks = db_->query_int("SELECT count(*) FROM chunks");
  i.vectors = db_->query_int("SELECT count(*) FROM chunks WHERE vector IS NOT NULL");
  i.faq = db_->query_int("SELECT count(*) FROM faq");
  i.text_bytes = db_->query_int("SELECT coalesce(sum(length), 0) FROM chunks");
  i.model_path = meta("embed_model");
  i.model_digest = meta("embed_digest");
  i.dim = to_int(meta("embed_dim"), 0);
  i.chunking.chunk_bytes = to_int(meta("chunk_bytes"), i.chunking.chunk_bytes);
  i.chunking.overlap_bytes = to_int(meta("chunk_overlap"), i.chunking.overlap_bytes);
  return i;
}

void KnowledgeBase::load_vectors() {
  const int64_t stamp = (db_->query_int("PRAGMA data_version") << 32) ^ sqlite3_total_changes64(db_->handle());
  if (stamp == matrix_stamp_) return;
  matrix_.clear();
  matrix_ids_.clear();
  matrix_dim_ = to_int(meta("embed_dim"), 0);
  Stmt s = db_->prepare("SELECT id, vector FROM chunks WHERE vector IS NOT NULL ORDER BY id");
  while (s.step()) {
    size_t bytes = 0;
    const void* p = s.col_blob(1, &bytes);
    if (bytes != static_cast<size_t>(matrix_dim_) * sizeof(float))
      throw Error(db_->path() + ": chunk " + std::to_string(s.col_int(0)) + " has a vector of " + std::to_string(bytes) +
                  " bytes, not " + std::to_string(matrix_dim_) + " float32 values (a damaged base?)");
    matrix_ids_.push_back(s.col_int(0));
    const auto* f = static_cast<const float*>(p);
    matrix_.insert(matrix_.end(), f, f + matrix_dim_);
  }
  matrix_stamp_ = stamp;
}

std::vector<SearchHit> KnowledgeBase::search(const std::string& query, const SearchOptions& o) {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<std::vector<int64_t>> lists;
  std::unordered_map<int64_t, std::pair<int, double>> bm25, cosine;  // id -> (rank, score)
  const size_t cand = static_cast<size_t>(std::max(o.candidates, o.k));
  if (o.lexical) {
    const std::string q = fts_query(query);
    if (!q.empty()) {
      Stmt s = db_->prepare("SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ?1 "
                            "ORDER BY bm25(chunks_fts), rowid LIMIT ?2");
      s.bind(1, q).bind(2, static_cast<int64_t>(cand));
      std::vector<int64_t> l;
      while (s.step()) {
        l.push_back(s.col_int(0));
        bm25[l.back()] = {static_cast<int>(l.size()), s.col_double(1)};
      }
      lists.push_back(std::move(l));
    }
  }
  if (o.vectors && embedder_ && !meta("embed_digest").empty() && !query.empty()) {
    load_vectors();
    if (!matrix_ids_.empty()) {
      const auto qv = embed_all(*embedder_, {query}, true, 1);
      std::vector<float> scores(matrix_ids_.size());
      cosine_scan(qv[0].data(), matrix_.data(), matrix_ids_.size(), static_cast<size_t>(matrix_dim_), scores.data());
      std::vector<int64_t> l;
      for (const Scored& sc : top_k(scores.data(), scores.size(), cand)) {
        l.push_back(matrix_ids_[sc.index]);
        cosine[l.back()] = {static_cast<int>(l.size()), sc.score};
      }
      lists.push_back(std::move(l));
    }
  }
  std::vector<SearchHit> hits;
  Stmt get = db_->prepare("SELECT c.offset, c.length, c.text, f.path FROM chunks c JOIN files f ON f.id = c.file_id WHERE c.id = ?1");
  for (const Fused& f : rrf_fuse(lists, static_cast<size_t>(std::max(0, o.k)))) {
    get.reset();
    get.bind(1, f.id);
    if (!get.step()) continue;
    SearchHit h;
    h.chunk_id = f.id;
    h.offset = static_cast<uint64_t>(get.col_int(0));
    h.length = static_cast<uint64_t>(get.col_int(1));
    h.text = get.col_text(2);
    h.source = get.col_text(3);
    h.score = f.score;
    if (auto it = bm25.find(f.id); it != bm25.end()) h.bm25_rank = it->second.first, h.bm25 = it->second.second;
    if (auto it = cosine.find(f.id); it != cosine.end()) h.vector_rank = it->second.first, h.cosine = it->second.second;
    hits.push_back(std::move(h));
    while (get.step()) {}
  }
  return hits;
}

}  // namespace eg::kb
