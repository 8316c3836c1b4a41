// The embedded backend of the state store: one SQLite file (Debian's libsqlite3).
//
// One writer connection behind a mutex (BEGIN IMMEDIATE), readers from a small
// pool (WAL: a reader never waits for the writer); journal_mode=WAL and
// synchronous=NORMAL (a commit survives a process crash; a power loss may lose
// the last commits, never consistency), foreign_keys=ON, busy_timeout 5 s.
// Statements are prepared once per connection and kept.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "state/sql_db.h"

namespace shardlm {

// Opens `path` (absolute), creating the file (0600) and missing directories (0700).
absl::StatusOr<std::unique_ptr<SqlDb>> OpenSqliteDb(const std::string& path);

}  // namespace shardlm
