// A small SQL layer under the state store (docs/stateful_apis.md section 8): one
// transaction per call, statements with `?` parameters, rows as values.
//
// SqlDb::Write(fn) runs fn(tx) in one transaction that takes the write lock
// first (SQLite's BEGIN IMMEDIATE): it commits when fn returns OK and rolls
// back otherwise, and a busy database is retried (up to 3 tries) before
// UNAVAILABLE. Read(fn) runs fn on a read-only snapshot.
//
//   SHARDLM_RETURN_IF_ERROR(db->Write([&](SqlTx& tx) -> absl::Status {
//     SHARDLM_ASSIGN_OR_RETURN(int64_t changed, tx.Exec("DELETE FROM threads WHERE id = ?", {id}));
//     return changed == 1 ? absl::OkStatus() : absl::NotFoundError(id);
//   }));
//
// A unique index violation is ALREADY_EXISTS naming the index; a database that
// cannot be reached is UNAVAILABLE. Statements are the same text on every
// backend (section 8, "One dialect").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shardlm {

// NULL, an integer, a real or text: what a parameter or a column holds.
using SqlValue = std::variant<std::monostate, int64_t, double, std::string>;
using SqlRow = std::vector<SqlValue>;

// A parameter from an optional: NULL when empty.
SqlValue SqlOptional(const std::optional<std::string>& v);
SqlValue SqlOptional(const std::optional<double>& v);
SqlValue SqlOptional(const std::optional<int64_t>& v);

// A column read back (a NULL as the empty optional, or as 0 / "" for the plain ones).
int64_t SqlInt(const SqlValue& v);
double SqlDouble(const SqlValue& v);
std::string SqlText(const SqlValue& v);
std::optional<std::string> SqlOptText(const SqlValue& v);
std::optional<int64_t> SqlOptInt(const SqlValue& v);
std::optional<double> SqlOptDouble(const SqlValue& v);

class SqlTx {
 public:
  virtual ~SqlTx() = default;
  // Runs a statement; the number of rows it changed.
  virtual absl::StatusOr<int64_t> Exec(const std::string& sql, const std::vector<SqlValue>& params = {}) = 0;
  // Runs a query; its rows.
  virtual absl::StatusOr<std::vector<SqlRow>> Query(const std::string& sql,
                                                    const std::vector<SqlValue>& params = {}) = 0;
};

class SqlDb {
 public:
  using TxFn = std::function<absl::Status(SqlTx&)>;
  virtual ~SqlDb() = default;
  virtual absl::Status Read(const TxFn& fn) = 0;
  virtual absl::Status Write(const TxFn& fn) = 0;
  // Runs fn in a transaction that no other writer (any process) can run beside: migrations.
  virtual absl::Status Exclusive(const TxFn& fn) = 0;
  // The database as printed: its URL without a password.
  virtual std::string Describe() const = 0;
};

// Where the state lives, from --state-db: "none", "sqlite:///ABSOLUTE/PATH", or a PostgreSQL
// URI ("postgresql://user:password@host:port/dbname?...", libpq's; "postgres://" too).
struct StateDbUrl {
  enum class Kind { kNone, kSqlite, kPostgres };
  Kind kind = Kind::kNone;
  std::string path;  // kSqlite: the file; kPostgres: the URI
};
// INVALID_ARGUMENT naming `flag` for another scheme or a relative path.
absl::StatusOr<StateDbUrl> ParseStateDbUrl(const std::string& url, const std::string& flag);

// Opens the database `url` names: a SQLite file is created when missing (mode 0600 in a 0700
// directory); a PostgreSQL server is connected to (UNAVAILABLE naming it, without its password).
absl::StatusOr<std::unique_ptr<SqlDb>> OpenSqlDb(const StateDbUrl& url);

}  // namespace shardlm
