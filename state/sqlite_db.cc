#include "state/sqlite_db.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "state/step_tx.h"

namespace shardlm {
namespace {

constexpr int kTries = 3;
constexpr int kMaxIdleReaders = 4;

bool IsBusy(int code) { return (code & 0xff) == SQLITE_BUSY || (code & 0xff) == SQLITE_LOCKED; }

absl::Status ErrorOf(sqlite3* db, int code, const std::string& sql) {
  const std::string what = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(code);
  if (code == SQLITE_CONSTRAINT_UNIQUE || code == SQLITE_CONSTRAINT_PRIMARYKEY) {
    return absl::AlreadyExistsError(what);  // "UNIQUE constraint failed: runs.thread_id"
  }
  if (IsBusy(code)) return absl::UnavailableError(absl::StrCat("state database busy: ", what));
  if ((code & 0xff) == SQLITE_CONSTRAINT) return absl::FailedPreconditionError(what);
  if ((code & 0xff) == SQLITE_IOERR || (code & 0xff) == SQLITE_FULL || (code & 0xff) == SQLITE_CANTOPEN) {
    return absl::UnavailableError(absl::StrCat("state database: ", what));
  }
  return absl::InternalError(absl::StrCat("state database: ", what, " (in: ", sql.substr(0, 80), ")"));
}

// One connection and the statements prepared on it.
class Connection {
 public:
  ~Connection() {
    for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
    sqlite3_close_v2(db_);
  }
  static absl::StatusOr<std::unique_ptr<Connection>> Open(const std::string& path, bool read_only) {
    std::unique_ptr<Connection> c(new Connection());
    const int flags =
        (read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) | SQLITE_OPEN_NOMUTEX;
    const int rc = sqlite3_open_v2(path.c_str(), &c->db_, flags, nullptr);
    if (rc != SQLITE_OK) {
      return absl::UnavailableError(
          absl::StrCat("cannot open ", path, ": ", c->db_ ? sqlite3_errmsg(c->db_) : sqlite3_errstr(rc)));
    }
    sqlite3_busy_timeout(c->db_, 5000);
    const char* pragmas = read_only
                              ? "PRAGMA foreign_keys=ON;"
                              : "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;";
    SHARDLM_RETURN_IF_ERROR(c->Run(pragmas));
    return c;
  }
  // Runs statements without parameters or results (BEGIN, COMMIT, pragmas).
  absl::Status Run(const char* sql) {
    char* message = nullptr;
    const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &message);
    if (message != nullptr) sqlite3_free(message);
    return rc == SQLITE_OK ? absl::OkStatus() : ErrorOf(db_, sqlite3_extended_errcode(db_), sql);
  }
  // Prepares (once), binds and steps `sql`; each row goes to `row` when given.
  absl::StatusOr<int64_t> Step(const std::string& sql, const std::vector<SqlValue>& params,
                               std::vector<SqlRow>* rows) {
    SHARDLM_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(sql));
    struct Reset {
      sqlite3_stmt* s;
      ~Reset() {
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
      }
    } reset{stmt};
    if (static_cast<int>(params.size()) != sqlite3_bind_parameter_count(stmt)) {
      return absl::InternalError(absl::StrCat("state database: ", params.size(), " parameters for ",
                                              sqlite3_bind_parameter_count(stmt),
                                              " in: ", sql.substr(0, 80)));
    }
    for (size_t i = 0; i < params.size(); ++i) Bind(stmt, static_cast<int>(i) + 1, params[i]);
    while (true) {
      const int rc = sqlite3_step(stmt);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return ErrorOf(db_, sqlite3_extended_errcode(db_), sql);
      if (rows != nullptr) rows->push_back(RowOf(stmt));
    }
    return static_cast<int64_t>(sqlite3_changes(db_));
  }

 private:
  Connection() = default;
  absl::StatusOr<sqlite3_stmt*> Prepare(const std::string& sql) {
    auto it = statements_.find(sql);
    if (it != statements_.end()) return it->second;
    sqlite3_stmt* stmt = nullptr;
    const int rc = sqlite3_prepare_v3(db_, sql.c_str(), static_cast<int>(sql.size()),
                                      SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) return ErrorOf(db_, sqlite3_extended_errcode(db_), sql);
    statements_.emplace(sql, stmt);
    return stmt;
  }
  static void Bind(sqlite3_stmt* stmt, int i, const SqlValue& v) {
    if (const auto* n = std::get_if<int64_t>(&v)) {
      sqlite3_bind_int64(stmt, i, *n);
    } else if (const auto* d = std::get_if<double>(&v)) {
      sqlite3_bind_double(stmt, i, *d);
    } else if (const auto* s = std::get_if<std::string>(&v)) {
      sqlite3_bind_text(stmt, i, s->data(), static_cast<int>(s->size()), SQLITE_TRANSIENT);
    } else {
      sqlite3_bind_null(stmt, i);
    }
  }
  static SqlRow RowOf(sqlite3_stmt* stmt) {
    SqlRow row;
    const int n = sqlite3_column_count(stmt);
    row.reserve(n);
    for (int i = 0; i < n; ++i) {
      switch (sqlite3_column_type(stmt, i)) {
        case SQLITE_INTEGER:
          row.emplace_back(static_cast<int64_t>(sqlite3_column_int64(stmt, i)));
          break;
        case SQLITE_FLOAT:
          row.emplace_back(sqlite3_column_double(stmt, i));
          break;
        case SQLITE_NULL:
          row.emplace_back(std::monostate());
          break;
        default: {
          const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt, i));
          row.emplace_back(std::string(text, static_cast<size_t>(sqlite3_column_bytes(stmt, i))));
        }
      }
    }
    return row;
  }

  sqlite3* db_ = nullptr;
  std::map<std::string, sqlite3_stmt*> statements_;
};

using Tx = StepTx<Connection>;

class SqliteDb : public SqlDb {
 public:
  SqliteDb(std::string path, std::unique_ptr<Connection> writer)
      : path_(std::move(path)), writer_(std::move(writer)) {}

  absl::Status Read(const TxFn& fn) override {
    SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<Connection> c, TakeReader());
    absl::Status st = InTransaction(*c, "BEGIN", fn);
    GiveBackReader(std::move(c));
    return st;
  }
  absl::Status Write(const TxFn& fn) override {
    std::lock_guard<std::mutex> lock(write_mu_);
    return Retrying(*writer_, "BEGIN IMMEDIATE", fn);
  }
  absl::Status Exclusive(const TxFn& fn) override {
    std::lock_guard<std::mutex> lock(write_mu_);
    return Retrying(*writer_, "BEGIN EXCLUSIVE", fn);
  }
  std::string Describe() const override { return "sqlite://" + path_; }

 private:
  static absl::Status InTransaction(Connection& c, const char* begin, const TxFn& fn) {
    SHARDLM_RETURN_IF_ERROR(c.Run(begin));
    Tx tx(c);
    absl::Status st = fn(tx);
    if (st.ok()) st = c.Run("COMMIT");
    if (!st.ok()) c.Run("ROLLBACK").IgnoreError();  // also after a failed COMMIT: nothing stays open
    return st;
  }
  // Another process holding the lock past busy_timeout: tried again, then UNAVAILABLE.
  static absl::Status Retrying(Connection& c, const char* begin, const TxFn& fn) {
    absl::Status st;
    for (int i = 0; i < kTries; ++i) {
      st = InTransaction(c, begin, fn);
      if (!absl::IsUnavailable(st) || !absl::StrContains(st.message(), "busy")) return st;
    }
    return st;
  }
  absl::StatusOr<std::unique_ptr<Connection>> TakeReader() {
    {
      std::lock_guard<std::mutex> lock(read_mu_);
      if (!readers_.empty()) {
        std::unique_ptr<Connection> c = std::move(readers_.back());
        readers_.pop_back();
        return c;
      }
    }
    return Connection::Open(path_, /*read_only=*/true);
  }
  void GiveBackReader(std::unique_ptr<Connection> c) {
    std::lock_guard<std::mutex> lock(read_mu_);
    if (static_cast<int>(readers_.size()) < kMaxIdleReaders) readers_.push_back(std::move(c));
  }

  const std::string path_;
  std::mutex write_mu_;
  std::unique_ptr<Connection> writer_;
  std::mutex read_mu_;
  std::vector<std::unique_ptr<Connection>> readers_;
};

// mkdir -p with mode 0700 for the directories it makes.
absl::Status MakeDirs(const std::string& dir) {
  if (dir.empty() || dir == "/") return absl::OkStatus();
  struct stat st;
  if (stat(dir.c_str(), &st) == 0) {
    return S_ISDIR(st.st_mode) ? absl::OkStatus()
                               : absl::FailedPreconditionError(dir + " is not a directory");
  }
  SHARDLM_RETURN_IF_ERROR(MakeDirs(dir.substr(0, dir.find_last_of('/'))));
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::UnavailableError(absl::StrCat("cannot create ", dir, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SqlDb>> OpenSqliteDb(const std::string& path) {
  SHARDLM_RETURN_IF_ERROR(MakeDirs(path.substr(0, path.find_last_of('/'))));
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  close(fd);
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<Connection> writer, Connection::Open(path, /*read_only=*/false));
  return std::unique_ptr<SqlDb>(new SqliteDb(path, std::move(writer)));
}

}  // namespace shardlm
