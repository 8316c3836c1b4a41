// The state store's schema, as numbered migrations compiled in
// (docs/stateful_apis.md section 8). A shipped migration is never edited: a
// change is a new one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "state/sql_db.h"

namespace shardlm {

struct Migration {
  int64_t version = 0;
  std::string name;
  std::vector<std::string> statements;
};

// Every migration this build knows, in order.
const std::vector<Migration>& StateMigrations();

// Applies the missing migrations in one exclusive transaction (another
// process starting at once waits, then finds them applied) and returns the
// schema version. A database newer than this build is FAILED_PRECONDITION.
absl::StatusOr<int64_t> Migrate(SqlDb& db, int64_t now_s);

}  // namespace shardlm
