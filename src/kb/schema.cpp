#include "kb/schema.h"

#include "core/error.h"
#include "kb/knowledge_base.h"

namespace eg::kb {

namespace {

constexpr const char* kSchema = R"SQL(
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE files(
  id INTEGER PRIMARY KEY,
  path TEXT NOT NULL UNIQUE,
  sha256 TEXT NOT NULL,
  bytes INTEGER NOT NULL,
  kind TEXT NOT NULL,
  added_at INTEGER NOT NULL);
CREATE TABLE chunks(
  id INTEGER PRIMARY KEY,
  file_id INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
  offset INTEGER NOT NULL,
  length INTEGER NOT NULL,
  sha256 TEXT NOT NULL,
  text TEXT NOT NULL,
  vector BLOB);
CREATE INDEX chunks_by_file ON chunks(file_id);
CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content='chunks', content_rowid='id',
  tokenize='unicode61 remove_diacritics 2');
CREATE TRIGGER chunks_fts_insert AFTER INSERT ON chunks BEGIN
  INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER chunks_fts_delete AFTER DELETE ON chunks BEGIN
  INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;
CREATE TABLE faq(
  id INTEGER PRIMARY KEY,
  question TEXT NOT NULL UNIQUE,
  answer TEXT NOT NULL,
  vector BLOB);
CREATE VIRTUAL TABLE faq_fts USING fts5(question, content='faq', content_rowid='id',
  tokenize='unicode61 remove_diacritics 2');
CREATE TRIGGER faq_fts_insert AFTER INSERT ON faq BEGIN
  INSERT INTO faq_fts(rowid, question) VALUES (new.id, new.question);
END;
CREATE TRIGGER faq_fts_delete AFTER DELETE ON faq BEGIN
  INSERT INTO faq_fts(faq_fts, rowid, question) VALUES ('delete', old.id, old.question);
END;
)SQL";

}  // namespace

void prepare_schema(Db& db, bool create, bool integrity) {
  // The first read: a file that is not SQLite fails here (SQLITE_NOTADB).
  const int64_t version = db.query_int("PRAGMA user_version");
  const int64_t tables = db.query_int("SELECT count(*) FROM sqlite_master");
  if (version == 0 && tables == 0) {
    if (!create) throw Error(db.path() + ": not an edgegemma knowledge base (an empty database)");
    Transaction t(db);
    db.exec(kSchema);
    db.exec("INSERT INTO meta(key, value) VALUES ('format', 'edgegemma-kb')");
    db.exec("PRAGMA user_version = " + std::to_string(kSchemaVersion));
    t.commit();
    return;
  }
  if (version > kSchemaVersion)
    throw Error(db.path() + ": made by a newer edgegemma (schema version " + std::to_string(version) +
                "; this build reads version " + std::to_string(kSchemaVersion) + ")");
  if (version != kSchemaVersion ||
      db.query_int("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('meta', 'files', 'chunks', 'faq')") != 4)
    throw Error(db.path() + ": not an edgegemma knowledge base (SQLite, but other tables)");
  if (integrity) {
    Stmt s = db.prepare("PRAGMA quick_check");
    std::string first;
    if (s.step()) first = s.col_text(0);
    if (first != "ok") throw Error(db.path() + ": the knowledge base is damaged (integrity check: " + first + ")");
  }
}

}  // namespace eg::kb
