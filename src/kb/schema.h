// The knowledge base's SQLite schema (version kSchemaVersion in PRAGMA user_version); tables in
// docs/knowledge-base.md.
#pragma once
#include "kb/sqlite_db.h"

namespace eg::kb {

/// An empty database (no tables, user_version 0): creates the schema when `create`, else an
/// eg::Error. Otherwise checks it: a newer schema version, or a database that is not a knowledge
/// base, is an eg::Error naming the file. With `integrity`, PRAGMA quick_check must say "ok".
void prepare_schema(Db& db, bool create, bool integrity);

}  // namespace eg::kb
