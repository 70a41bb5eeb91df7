// A thin RAII layer over SQLite 3 (Debian's libsqlite3) for the knowledge base: one connection
// (Db) and prepared statements (Stmt). Every failure is an eg::Error naming the database file and
// SQLite's message; a database another process holds locked waits busy_timeout_ms, then is a
// clear "database is locked" error.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

struct sqlite3;
struct sqlite3_stmt;

namespace eg::kb {

class Stmt;

class Db {
 public:
  struct OpenOptions {
    bool create = false;     // create the file when missing (else a missing file is an error)
    bool read_only = false;  // SQLITE_OPEN_READONLY
    int busy_timeout_ms = 5000;
  };
  /// Opens `path` (WAL journal, foreign keys on, the busy timeout). Throws eg::Error.
  Db(const std::string& path, const OpenOptions& o);
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  /// Runs SQL text (one or more statements, no results). Throws eg::Error with `what`.
  void exec(const std::string& sql);
  Stmt prepare(std::string_view sql);
  /// The value of a single-integer query (e.g. "PRAGMA user_version"); `fallback` when no row.
  int64_t query_int(const std::string& sql, int64_t fallback = 0);
  int64_t last_insert_rowid() const;
  int changes() const;
  const std::string& path() const { return path_; }
  sqlite3* handle() const { return db_; }
  /// Throws eg::Error "<path>: <what>: <sqlite message>" for result code `rc`.
  [[noreturn]] void fail(int rc, const std::string& what) const;

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
};

/// A prepared statement. bind_*() take 1-based indices; step() returns true while there is a row.
class Stmt {
 public:
  Stmt(const Db& db, sqlite3_stmt* s) : db_(&db), s_(s) {}
  Stmt(Stmt&& o) noexcept : db_(o.db_), s_(o.s_) { o.s_ = nullptr; }
  ~Stmt();
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& bind(int i, int64_t v);
  Stmt& bind(int i, double v);
  Stmt& bind(int i, std::string_view text);
  Stmt& bind_blob(int i, const void* data, size_t bytes);
  Stmt& bind_null(int i);
  bool step();
  /// step() that must finish (an INSERT / UPDATE / DELETE).
  void run() { while (step()) {} }
  void reset();

  int64_t col_int(int i) const;
  double col_double(int i) const;
  std::string col_text(int i) const;
  bool col_is_null(int i) const;
  /// A float32 BLOB column as floats (empty for NULL). Throws when its size is not a multiple of 4.
  std::vector<float> col_floats(int i) const;
  const void* col_blob(int i, size_t* bytes) const;

 private:
  const Db* db_;
  sqlite3_stmt* s_;
};

/// BEGIN IMMEDIATE ... COMMIT; rolls back when destroyed without commit() (an exception).
class Transaction {
 public:
  explicit Transaction(Db& db);
  ~Transaction();
  void commit();

 private:
  Db& db_;
  bool done_ = false;
};

}  // namespace eg::kb
