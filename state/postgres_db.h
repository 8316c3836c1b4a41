// The shared backend of the state store: PostgreSQL through libpq, for serves
// that share their state (replicas behind one router).
//
// Connections come from a pool (at most 16, one opened at start so that a bad
// URL fails then); each prepares a statement once, at first use, and keeps it.
// A write is one READ COMMITTED transaction (the store's statements take the
// row locks they need: the thread's version, the seq counter); a read, one
// REPEATABLE READ READ ONLY snapshot; migrations hold an advisory lock. The
// store's `?` parameters become $1..$n (quoted text skipped). A serialization
// failure or deadlock is retried (3 tries, as SQLite's busy database); a
// broken connection is dropped and its call is UNAVAILABLE. statement_timeout
// is 10 s. No password is ever printed: Describe() leaves it out.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "state/sql_db.h"

namespace shardlm {

// Connects to `url` (a libpq URI: postgresql://user:password@host:port/dbname?...).
absl::StatusOr<std::unique_ptr<SqlDb>> OpenPostgresDb(const std::string& url);

// The statement with its `?` parameters numbered $1..$n, quoted text and identifiers left alone.
std::string NumberedParameters(const std::string& sql);

}  // namespace shardlm
