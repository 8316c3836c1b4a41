#include "state/sql_db.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "state/postgres_db.h"
#include "state/sqlite_db.h"

namespace shardlm {

SqlValue SqlOptional(const std::optional<std::string>& v) { return v ? SqlValue(*v) : SqlValue(); }
SqlValue SqlOptional(const std::optional<double>& v) { return v ? SqlValue(*v) : SqlValue(); }
SqlValue SqlOptional(const std::optional<int64_t>& v) { return v ? SqlValue(*v) : SqlValue(); }

int64_t SqlInt(const SqlValue& v) {
  if (const auto* n = std::get_if<int64_t>(&v)) return *n;
  if (const auto* d = std::get_if<double>(&v)) return static_cast<int64_t>(*d);
  return 0;
}

double SqlDouble(const SqlValue& v) {
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* n = std::get_if<int64_t>(&v)) return static_cast<double>(*n);
  return 0;
}

std::string SqlText(const SqlValue& v) {
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  return "";
}

std::optional<std::string> SqlOptText(const SqlValue& v) {
  if (std::holds_alternative<std::monostate>(v)) return std::nullopt;
  return SqlText(v);
}

std::optional<int64_t> SqlOptInt(const SqlValue& v) {
  if (std::holds_alternative<std::monostate>(v)) return std::nullopt;
  return SqlInt(v);
}

std::optional<double> SqlOptDouble(const SqlValue& v) {
  if (std::holds_alternative<std::monostate>(v)) return std::nullopt;
  return SqlDouble(v);
}

absl::StatusOr<StateDbUrl> ParseStateDbUrl(const std::string& url, const std::string& flag) {
  StateDbUrl out;
  if (url == "none") return out;
  constexpr absl::string_view kSqlite = "sqlite://";
  if (absl::StartsWith(url, kSqlite)) {
    out.kind = StateDbUrl::Kind::kSqlite;
    out.path = url.substr(kSqlite.size());
    if (out.path.empty() || out.path[0] != '/' || out.path.back() == '/') {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": '", url, "' names no absolute file (expected sqlite:///ABS/PATH)"));
    }
    return out;
  }
  if (absl::StartsWith(url, "postgresql://") || absl::StartsWith(url, "postgres://")) {
    out.kind = StateDbUrl::Kind::kPostgres;
    out.path = url;
    return out;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(flag, ": '", url.substr(0, url.find(':')),
                   "' is not a state database (expected none, sqlite:///ABS/PATH or postgresql://...)"));
}

absl::StatusOr<std::unique_ptr<SqlDb>> OpenSqlDb(const StateDbUrl& url) {
  if (url.kind == StateDbUrl::Kind::kSqlite) return OpenSqliteDb(url.path);
  if (url.kind == StateDbUrl::Kind::kPostgres) return OpenPostgresDb(url.path);
  return absl::InvalidArgumentError("no state database (--state-db none)");
}

}  // namespace shardlm
