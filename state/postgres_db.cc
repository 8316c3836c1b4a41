#include "state/postgres_db.h"

#include <libpq-fe.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "common/url_password.h"
#include "state/step_tx.h"

namespace shardlm {
// Named apart from sqlite_db.cc's file-local classes (a unity build compiles both at once).
namespace pg {
namespace {

constexpr int kTries = 3;
constexpr size_t kMaxConnections = 16;
constexpr int64_t kMigrationLock = 0x73686172646c6d;  // "shardlm": the advisory lock migrations hold

// Type OIDs of the columns the store reads (pg_type.h).
constexpr Oid kBool = 16, kInt8 = 20, kInt2 = 21, kInt4 = 23, kFloat4 = 700, kFloat8 = 701, kNumeric = 1700;

using Result = std::unique_ptr<PGresult, decltype(&PQclear)>;

absl::Status ErrorOf(PGconn* conn, const PGresult* res, const std::string& sql) {
  const char* state = res != nullptr ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
  std::string what = res != nullptr ? PQresultErrorMessage(res) : PQerrorMessage(conn);
  while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
  const std::string code = state != nullptr ? state : "";
  if (code == "23505") return absl::AlreadyExistsError(what);  // a unique index, named in `what`
  if (code == "40001" || code == "40P01" || code == "55P03") {
    return absl::UnavailableError(absl::StrCat("state database busy: ", what));
  }
  if (absl::StartsWith(code, "23")) return absl::FailedPreconditionError(what);
  if (code == "57014") return absl::DeadlineExceededError(absl::StrCat("state database: ", what));
  if (PQstatus(conn) != CONNECTION_OK || code.empty() || absl::StartsWith(code, "08") ||
      absl::StartsWith(code, "57P")) {
    return absl::UnavailableError(absl::StrCat("state database: ", what));
  }
  return absl::InternalError(absl::StrCat("state database: ", what, " (in: ", sql.substr(0, 80), ")"));
}

SqlValue ValueOf(const PGresult* res, int row, int col) {
  if (PQgetisnull(res, row, col)) return SqlValue();
  const char* text = PQgetvalue(res, row, col);
  const Oid type = PQftype(res, col);
  if (type == kInt8 || type == kInt4 || type == kInt2) {
    int64_t n = 0;
    if (absl::SimpleAtoi(text, &n)) return SqlValue(n);
  } else if (type == kFloat8 || type == kFloat4 || type == kNumeric) {
    double d = 0;
    if (absl::SimpleAtod(text, &d)) return SqlValue(d);
  } else if (type == kBool) {
    return SqlValue(static_cast<int64_t>(text[0] == 't'));
  }
  return SqlValue(std::string(text, static_cast<size_t>(PQgetlength(res, row, col))));
}

// A parameter as libpq's text format (null: NULL).
struct TextParams {
  explicit TextParams(const std::vector<SqlValue>& params) {
    texts.reserve(params.size());
    for (const SqlValue& v : params) {
      if (const auto* n = std::get_if<int64_t>(&v)) {
        texts.push_back(std::to_string(*n));
      } else if (const auto* d = std::get_if<double>(&v)) {
        texts.push_back(absl::StrFormat("%.17g", *d));
      } else if (const auto* s = std::get_if<std::string>(&v)) {
        texts.push_back(*s);
      } else {
        texts.emplace_back();
      }
    }
    for (size_t i = 0; i < params.size(); ++i) {
      values.push_back(std::holds_alternative<std::monostate>(params[i]) ? nullptr : texts[i].c_str());
    }
  }
  std::vector<std::string> texts;
  std::vector<const char*> values;
};

// One connection and the statements prepared on it.
class Connection {
 public:
  ~Connection() { PQfinish(conn_); }
  static absl::StatusOr<std::unique_ptr<Connection>> Open(const std::string& url) {
    const char* keys[] = {"dbname", "connect_timeout", "application_name", nullptr};
    const char* values[] = {url.c_str(), "10", "shardlm", nullptr};
    std::unique_ptr<Connection> c(new Connection(PQconnectdbParams(keys, values, /*expand_dbname=*/1)));
    if (c->conn_ == nullptr || PQstatus(c->conn_) != CONNECTION_OK) {
      std::string why = c->conn_ != nullptr ? PQerrorMessage(c->conn_) : "out of memory";
      while (!why.empty() && why.back() == '\n') why.pop_back();
      return absl::UnavailableError(absl::StrCat("cannot connect to ", WithoutUrlPassword(url), ": ", why));
    }
    PQsetNoticeProcessor(
        c->conn_, [](void*, const char*) {}, nullptr);  // "already exists, skipping"
    SHARDLM_RETURN_IF_ERROR(c->Run("SET statement_timeout = 10000"));
    return c;
  }
  bool broken() const { return PQstatus(conn_) != CONNECTION_OK; }
  // Runs a statement without parameters or results (BEGIN, COMMIT, SET).
  absl::Status Run(const std::string& sql) {
    Result res(PQexec(conn_, sql.c_str()), &PQclear);
    const ExecStatusType s = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
    if (s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK) return absl::OkStatus();
    return ErrorOf(conn_, res.get(), sql);
  }
  // Prepares (once) and runs `sql`; each row goes to `rows` when given. Returns the rows changed.
  absl::StatusOr<int64_t> Step(const std::string& sql, const std::vector<SqlValue>& params,
                               std::vector<SqlRow>* rows) {
    SHARDLM_ASSIGN_OR_RETURN(std::string name, Prepare(sql, static_cast<int>(params.size())));
    TextParams text(params);
    Result res(PQexecPrepared(conn_, name.c_str(), static_cast<int>(params.size()), text.values.data(),
                              nullptr, nullptr, /*resultFormat=*/0),
               &PQclear);
    const ExecStatusType s = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) return ErrorOf(conn_, res.get(), sql);
    if (rows != nullptr) {
      for (int r = 0; r < PQntuples(res.get()); ++r) {
        SqlRow row;
        for (int c = 0; c < PQnfields(res.get()); ++c) row.push_back(ValueOf(res.get(), r, c));
        rows->push_back(std::move(row));
      }
    }
    int64_t changed = 0;
    if (!absl::SimpleAtoi(PQcmdTuples(res.get()), &changed)) changed = 0;
    return changed;
  }

 private:
  explicit Connection(PGconn* conn) : conn_(conn) {}
  absl::StatusOr<std::string> Prepare(const std::string& sql, int n) {
    auto it = statements_.find(sql);
    if (it != statements_.end()) return it->second;
    const std::string name = absl::StrCat("s", statements_.size());
    const std::string numbered = NumberedParameters(sql);
    Result res(PQprepare(conn_, name.c_str(), numbered.c_str(), n, nullptr), &PQclear);
    if (!res || PQresultStatus(res.get()) != PGRES_COMMAND_OK) return ErrorOf(conn_, res.get(), sql);
    statements_.emplace(sql, name);
    return name;
  }

  PGconn* conn_;
  std::map<std::string, std::string> statements_;  // the store's text -> its prepared name
};

using Tx = StepTx<Connection>;

class PostgresDb : public SqlDb {
 public:
  PostgresDb(std::string url, std::unique_ptr<Connection> first) : url_(std::move(url)) {
    idle_.push_back(std::move(first));
    open_ = 1;
  }
  absl::Status Read(const TxFn& fn) override {
    return Retrying("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "", fn);
  }
  absl::Status Write(const TxFn& fn) override { return Retrying("BEGIN", "", fn); }
  absl::Status Exclusive(const TxFn& fn) override {
    // Another serve migrating may hold the lock for longer than statement_timeout: wait for it.
    return Retrying(
        "BEGIN",
        absl::StrCat("SET LOCAL statement_timeout = 0; SELECT pg_advisory_xact_lock(", kMigrationLock, ")"),
        fn);
  }
  std::string Describe() const override { return WithoutUrlPassword(url_); }

 private:
  absl::Status Retrying(const std::string& begin, const std::string& lock, const TxFn& fn) {
    absl::Status st;
    for (int i = 0; i < kTries; ++i) {
      SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<Connection> c, Take());
      try {
        st = InTransaction(*c, begin, lock, fn);
      } catch (...) {  // a row that did not parse, memory: the connection goes, its place in the pool too
        c.reset();
        GiveBack(nullptr);
        throw;
      }
      GiveBack(std::move(c));
      if (!absl::IsUnavailable(st) || !absl::StrContains(st.message(), "busy")) return st;
    }
    return st;
  }
  static absl::Status InTransaction(Connection& c, const std::string& begin, const std::string& lock,
                                    const TxFn& fn) {
    SHARDLM_RETURN_IF_ERROR(c.Run(begin));
    absl::Status st = lock.empty() ? absl::OkStatus() : c.Run(lock);
    Tx tx(c);
    if (st.ok()) st = fn(tx);
    if (st.ok()) st = c.Run("COMMIT");
    if (!st.ok() && !c.broken()) c.Run("ROLLBACK").IgnoreError();  // also after a failed COMMIT
    return st;
  }
  // An idle connection, a new one while fewer than kMaxConnections are open, else the next
  // one given back.
  absl::StatusOr<std::unique_ptr<Connection>> Take() {
    std::unique_lock<std::mutex> lock(mu_);
    freed_.wait(lock, [&] { return !idle_.empty() || open_ < kMaxConnections; });
    if (!idle_.empty()) {
      std::unique_ptr<Connection> c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
    ++open_;
    lock.unlock();
    absl::StatusOr<std::unique_ptr<Connection>> c = Connection::Open(url_);
    if (!c.ok()) {
      std::lock_guard<std::mutex> relock(mu_);
      --open_;
      freed_.notify_one();
    }
    return c;
  }
  // A broken connection is closed (null: already closed): the next call opens another.
  void GiveBack(std::unique_ptr<Connection> c) {
    std::lock_guard<std::mutex> lock(mu_);
    if (c == nullptr || c->broken()) {
      --open_;
    } else {
      idle_.push_back(std::move(c));
    }
    freed_.notify_one();
  }

  const std::string url_;
  std::mutex mu_;
  std::condition_variable freed_;
  std::vector<std::unique_ptr<Connection>> idle_;
  size_t open_ = 0;
};

}  // namespace
}  // namespace pg

std::string NumberedParameters(const std::string& sql) {
  std::string out;
  out.reserve(sql.size() + 16);
  int n = 0;
  char quote = 0;  // inside '...' or "..."
  for (char ch : sql) {
    if (quote != 0) {
      if (ch == quote) quote = 0;  // a doubled quote closes and reopens: the same text
      out.push_back(ch);
    } else if (ch == '\'' || ch == '"') {
      quote = ch;
      out.push_back(ch);
    } else if (ch == '?') {
      absl::StrAppend(&out, "$", ++n);
    } else {
      out.push_back(ch);
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<SqlDb>> OpenPostgresDb(const std::string& url) {
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<pg::Connection> first, pg::Connection::Open(url));
  return std::unique_ptr<SqlDb>(new pg::PostgresDb(url, std::move(first)));
}

}  // namespace shardlm
