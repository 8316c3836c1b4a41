#include "cli/serve_state.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status.h"
#include "common/url_password.h"

namespace shardlm {

absl::StatusOr<std::unique_ptr<StateStore>> OpenServeState(const ServeFlags& f, const CliEnv& env) {
  const bool chosen = f.state_db.has_value() || f.state_dir.has_value();
  std::string url;
  std::string flag = "--state-db";
  if (f.state_db) {
    url = *f.state_db;
  } else {
    const std::string dir = f.state_dir.value_or(env.state_home);
    if (f.state_dir) flag = "--state-dir";
    if (f.state_dir && (dir.empty() || dir[0] != '/')) {
      return absl::InvalidArgumentError(
          absl::StrCat("--state-dir: '", dir, "' is not an absolute directory"));
    }
    url = dir.empty() ? "none" : absl::StrCat("sqlite://", dir, "/state.db");
  }
  SHARDLM_ASSIGN_OR_RETURN(StateDbUrl parsed, ParseStateDbUrl(url, flag));
  if (parsed.kind == StateDbUrl::Kind::kNone) {
    std::printf("state: none (the Assistants API is off)\n");
    return std::unique_ptr<StateStore>();
  }
  absl::StatusOr<std::unique_ptr<StateStore>> store = [&]() -> absl::StatusOr<std::unique_ptr<StateStore>> {
    SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<SqlDb> db, OpenSqlDb(parsed));
    return StateStore::Open(std::move(db), absl::ToUnixSeconds(absl::Now()));
  }();
  if (!store.ok()) {
    if (!chosen && !absl::IsFailedPrecondition(store.status())) {
      std::fprintf(
          stderr,
          "shardlm: state: cannot open %s (%s); the Assistants API is off (give --state-dir or --state-db)\n",
          WithoutUrlPassword(url).c_str(), std::string(store.status().message()).c_str());
      return std::unique_ptr<StateStore>();
    }
    return absl::Status(store.status().code() == absl::StatusCode::kInvalidArgument
                            ? absl::StatusCode::kUnavailable
                            : store.status().code(),
                        absl::StrCat(flag, ": ", WithoutUrlPassword(url), ": ", store.status().message()));
  }
  std::printf("state in %s (schema %lld)\n", (*store)->Describe().c_str(),
              static_cast<long long>((*store)->schema_version()));
  return store;
}

}  // namespace shardlm
