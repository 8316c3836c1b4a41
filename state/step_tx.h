// The SqlTx both backends hand a transaction's function (sqlite_db.cc, postgres_db.cc): each
// statement goes to the connection's Step(sql, params, rows), which prepares it once and runs it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "state/sql_db.h"

namespace shardlm {

template <class Connection>
class StepTx : public SqlTx {
 public:
  explicit StepTx(Connection& c) : c_(c) {}
  absl::StatusOr<int64_t> Exec(const std::string& sql, const std::vector<SqlValue>& params) override {
    return c_.Step(sql, params, nullptr);
  }
  absl::StatusOr<std::vector<SqlRow>> Query(const std::string& sql,
                                            const std::vector<SqlValue>& params) override {
    std::vector<SqlRow> rows;
    SHARDLM_RETURN_IF_ERROR(c_.Step(sql, params, &rows).status());
    return rows;
  }

 private:
  Connection& c_;
};

}  // namespace shardlm
