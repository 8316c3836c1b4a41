#include "state/store.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "state/migrations.h"

namespace shardlm {

absl::StatusOr<std::unique_ptr<StateStore>> StateStore::Open(std::unique_ptr<SqlDb> db, int64_t now_s) {
  SHARDLM_ASSIGN_OR_RETURN(int64_t version, Migrate(*db, now_s));
  return std::unique_ptr<StateStore>(new StateStore(std::move(db), version));
}

absl::Status NotFoundObject(const std::string& kind, const std::string& id) {
  return absl::NotFoundError(absl::StrCat("No ", kind, " found with id '", id, "'."));
}

}  // namespace shardlm
