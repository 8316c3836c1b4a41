#include "state/list_rows.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace shardlm {
namespace {

// The seq of cursor row `id`, or INVALID_ARGUMENT naming `param`.
absl::StatusOr<int64_t> CursorSeq(SqlTx& tx, const std::string& table, const std::string& where,
                                  const std::vector<SqlValue>& params, const std::string& id,
                                  const std::string& param) {
  std::vector<SqlValue> p = params;
  p.emplace_back(id);
  SHARDLM_ASSIGN_OR_RETURN(
      std::vector<SqlRow> rows,
      tx.Query(absl::StrCat("SELECT seq FROM ", table, " WHERE ", where, " AND id = ?"), p));
  if (rows.empty()) {
    return WithField(
        absl::InvalidArgumentError(absl::StrCat(param, ": '", id, "' is not an item of this list")), param);
  }
  return SqlInt(rows[0][0]);
}

}  // namespace

absl::StatusOr<std::vector<SqlRow>> ListRows(SqlTx& tx, const std::string& table, const std::string& columns,
                                             const std::string& where, const std::vector<SqlValue>& params,
                                             const ListQuery& q, bool* has_more) {
  std::string sql = absl::StrCat("SELECT ", columns, " FROM ", table, " WHERE ", where);
  std::vector<SqlValue> p = params;
  // "after" continues the list in its order; "before" goes back against it.
  const char* after_op = q.ascending ? ">" : "<";
  const char* before_op = q.ascending ? "<" : ">";
  if (!q.after.empty()) {
    SHARDLM_ASSIGN_OR_RETURN(int64_t seq, CursorSeq(tx, table, where, params, q.after, "after"));
    absl::StrAppend(&sql, " AND seq ", after_op, " ?");
    p.emplace_back(seq);
  }
  if (!q.before.empty()) {
    SHARDLM_ASSIGN_OR_RETURN(int64_t seq, CursorSeq(tx, table, where, params, q.before, "before"));
    absl::StrAppend(&sql, " AND seq ", before_op, " ?");
    p.emplace_back(seq);
  }
  // With only "before", the page is the `limit` rows nearest it: read backwards, then turn around.
  const bool backwards = !q.before.empty() && q.after.empty();
  const bool ascending = backwards ? !q.ascending : q.ascending;
  absl::StrAppend(&sql, " ORDER BY seq ", ascending ? "ASC" : "DESC", " LIMIT ?");
  p.emplace_back(static_cast<int64_t>(q.limit) + 1);
  SHARDLM_ASSIGN_OR_RETURN(std::vector<SqlRow> rows, tx.Query(sql, p));
  *has_more = static_cast<int>(rows.size()) > q.limit;
  if (*has_more) rows.resize(static_cast<size_t>(q.limit));
  if (backwards) std::reverse(rows.begin(), rows.end());
  return rows;
}

absl::StatusOr<int64_t> NextSeq(SqlTx& tx) {
  SHARDLM_ASSIGN_OR_RETURN(
      std::vector<SqlRow> rows,
      tx.Query("UPDATE counters SET value = value + 1 WHERE name = 'seq' RETURNING value"));
  if (rows.empty()) return absl::InternalError("state database: the seq counter is missing");
  return SqlInt(rows[0][0]);
}

}  // namespace shardlm
