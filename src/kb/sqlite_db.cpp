#include "kb/sqlite_db.h"

#include <sqlite3.h>

#include <cstring>

#include "core/error.h"

namespace eg::kb {

Db::Db(const std::string& path, const OpenOptions& o) : path_(path) {
  int flags = o.read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE;
  if (o.create && !o.read_only) flags |= SQLITE_OPEN_CREATE;
  flags |= SQLITE_OPEN_FULLMUTEX;  // a connection may be shared by server threads
  const int rc = sqlite3_open_v2(path.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    db_ = nullptr;
    if (rc == SQLITE_CANTOPEN && !o.create) msg = "no such database file (create one with `edgegemma kb add`)";
    throw Error(path + ": cannot open the knowledge base: " + msg);
  }
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, o.busy_timeout_ms);
}

Db::~Db() { sqlite3_close_v2(db_); }

void Db::fail(int rc, const std::string& what) const {
  std::string msg = sqlite3_errmsg(db_);
  const int primary = rc & 0xff;
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED)
    msg += " (another process holds the database; retry when it is done)";
  else if (primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB)
    msg += " (the file is damaged or not a knowledge base)";
  else if (primary == SQLITE_FULL)
    msg += " (the disk is full)";
  else if (primary == SQLITE_READONLY)
    msg += " (the database is read-only)";
  throw Error(path_ + ": " + what + ": " + msg);
}

void Db::exec(const std::string& sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
  sqlite3_free(err);
  if (rc != SQLITE_OK) fail(rc, "SQL failed");
}

Stmt Db::prepare(std::string_view sql) {
  sqlite3_stmt* s = nullptr;
  const int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &s, nullptr);
  if (rc != SQLITE_OK) fail(rc, "cannot prepare a statement");
  return Stmt(*this, s);
}

int64_t Db::query_int(const std::string& sql, int64_t fallback) {
  Stmt s = prepare(sql);
  return s.step() ? s.col_int(0) : fallback;
}

int64_t Db::last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }
int Db::changes() const { return sqlite3_changes(db_); }

Stmt::~Stmt() { sqlite3_finalize(s_); }

Stmt& Stmt::bind(int i, int64_t v) {
  if (const int rc = sqlite3_bind_int64(s_, i, v); rc != SQLITE_OK) db_->fail(rc, "bind");
  return *this;
}
Stmt& Stmt::bind(int i, double v) {
  if (const int rc = sqlite3_bind_double(s_, i, v); rc != SQLITE_OK) db_->fail(rc, "bind");
  return *this;
}
Stmt& Stmt::bind(int i, std::string_view t) {
  if (const int rc = sqlite3_bind_text64(s_, i, t.data(), t.size(), SQLITE_TRANSIENT, SQLITE_UTF8); rc != SQLITE_OK)
    db_->fail(rc, "bind");
  return *this;
}
Stmt& Stmt::bind_blob(int i, const void* data, size_t bytes) {
  if (const int rc = sqlite3_bind_blob64(s_, i, data, bytes, SQLITE_TRANSIENT); rc != SQLITE_OK) db_->fail(rc, "bind");
  return *this;
}
Stmt& Stmt::bind_null(int i) {
  if (const int rc = sqlite3_bind_null(s_, i); rc != SQLITE_OK) db_->fail(rc, "bind");
  return *this;
}

bool Stmt::step() {
  const int rc = sqlite3_step(s_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  db_->fail(rc, "query failed");
}

void Stmt::reset() {
  sqlite3_reset(s_);
  sqlite3_clear_bindings(s_);
}

int64_t Stmt::col_int(int i) const { return sqlite3_column_int64(s_, i); }
double Stmt::col_double(int i) const { return sqlite3_column_double(s_, i); }
std::string Stmt::col_text(int i) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, i));
  return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(s_, i))) : std::string();
}
bool Stmt::col_is_null(int i) const { return sqlite3_column_type(s_, i) == SQLITE_NULL; }
const void* Stmt::col_blob(int i, size_t* bytes) const {
  const void* p = sqlite3_column_blob(s_, i);
  *bytes = static_cast<size_t>(sqlite3_column_bytes(s_, i));
  return p;
}
std::vector<float> Stmt::col_floats(int i) const {
  size_t n = 0;
  const void* p = col_blob(i, &n);
  if (n % sizeof(float) != 0) throw Error(db_->path() + ": a stored vector has " + std::to_string(n) + " bytes (not float32)");
  std::vector<float> v(n / sizeof(float));
  if (n) std::memcpy(v.data(), p, n);
  return v;
}

Transaction::Transaction(Db& db) : db_(db) { db_.exec("BEGIN IMMEDIATE"); }
Transaction::~Transaction() {
  if (!done_) sqlite3_exec(db_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
}
void Transaction::commit() {
  db_.exec("COMMIT");
  done_ = true;
}

}  // namespace eg::kb
