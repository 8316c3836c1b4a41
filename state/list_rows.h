// Cursor pagination over one table, for every list the stores serve: an index
// seek and one page, whatever the table's size (docs/stateful_apis.md section 3).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "state/rows.h"
#include "state/sql_db.h"

namespace shardlm {

// The rows of `table` (its `columns`) matching `where` (with `params`),
// ordered by seq as `q` asks, after or before the rows q.after and q.before
// name (ids that must match `where` too: else INVALID_ARGUMENT naming
// "after" or "before"). *has_more: more rows lie beyond the page.
absl::StatusOr<std::vector<SqlRow>> ListRows(SqlTx& tx, const std::string& table, const std::string& columns,
                                             const std::string& where, const std::vector<SqlValue>& params,
                                             const ListQuery& q, bool* has_more);

// The next value of the one counter that orders every table.
absl::StatusOr<int64_t> NextSeq(SqlTx& tx);

}  // namespace shardlm
