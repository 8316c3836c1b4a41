// StateStore's serve instances: heartbeats, and the runs of instances that stopped.
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "state/store.h"

namespace shardlm {
namespace {

// Whether instance `runner` has stopped: no row, no heartbeat since `stale_before_s`, or on
// this host with its process gone (a reused pid only delays this to the heartbeat's age).
absl::StatusOr<bool> Stopped(SqlTx& tx, const std::string& runner, const std::string& host,
                             int64_t stale_before_s, const std::function<bool(int64_t)>& pid_alive) {
  SHARDLM_ASSIGN_OR_RETURN(std::vector<SqlRow> rows,
                           tx.Query("SELECT host, pid, heartbeat_at FROM instances WHERE id = ?", {runner}));
  if (rows.empty()) return true;
  if (SqlInt(rows[0][2]) < stale_before_s) return true;
  return SqlText(rows[0][0]) == host && !pid_alive(SqlInt(rows[0][1]));
}

}  // namespace

absl::Status StateStore::Heartbeat(const std::string& instance, const std::string& host, int64_t pid,
                                   int64_t now_s) {
  return db_->Write([&](SqlTx& tx) -> absl::Status {
    return tx
        .Exec(
            "INSERT INTO instances (id, host, pid, started_at, heartbeat_at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at",
            {instance, host, pid, now_s, now_s})
        .status();
  });
}

absl::Status StateStore::RemoveInstance(const std::string& instance) {
  return db_->Write([&](SqlTx& tx) -> absl::Status {
    return tx.Exec("DELETE FROM instances WHERE id = ?", {instance}).status();
  });
}

absl::StatusOr<std::vector<RunRow>> StateStore::ReapRuns(const std::string& instance, const std::string& host,
                                                         int64_t now_s, int64_t stale_before_s,
                                                         const std::function<bool(int64_t pid)>& pid_alive) {
  std::vector<RunRow> queued;
  SHARDLM_RETURN_IF_ERROR(db_->Write([&](SqlTx& tx) -> absl::Status {
    queued.clear();  // a busy database runs this again
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> runners,
        tx.Query(absl::StrCat("SELECT DISTINCT runner FROM runs WHERE runner IS NOT NULL AND runner <> ? AND "
                              "status IN ",
                              kActiveRunStatuses),
                 {instance}));
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> response_runners,
        tx.Query("SELECT DISTINCT runner FROM responses WHERE runner IS NOT NULL AND runner <> ? AND "
                 "status = 'in_progress'",
                 {instance}));
    runners.insert(runners.end(), response_runners.begin(), response_runners.end());
    for (const SqlRow& r : runners) {
      const std::string runner = SqlText(r[0]);
      SHARDLM_ASSIGN_OR_RETURN(bool stopped, Stopped(tx, runner, host, stale_before_s, pid_alive));
      if (!stopped) continue;
      const std::string error =
          "{\"code\":\"server_error\",\"message\":\"the server running this run stopped\"}";
      SHARDLM_RETURN_IF_ERROR(tx.Exec("UPDATE runs SET status = 'failed', failed_at = ?, last_error = ? "
                                      "WHERE runner = ? AND status = 'in_progress'",
                                      {now_s, error, runner})
                                  .status());
      SHARDLM_RETURN_IF_ERROR(tx.Exec("UPDATE responses SET status = 'failed', completed_at = ?, error = ? "
                                      "WHERE runner = ? AND status = 'in_progress'",
                                      {now_s, error, runner})
                                  .status());
      SHARDLM_RETURN_IF_ERROR(tx.Exec("UPDATE runs SET status = 'cancelled', cancelled_at = ? "
                                      "WHERE runner = ? AND status = 'cancelling'",
                                      {now_s, runner})
                                  .status());
      SHARDLM_ASSIGN_OR_RETURN(std::vector<SqlRow> rows,
                               tx.Query("UPDATE runs SET runner = ? WHERE runner = ? AND status = 'queued' "
                                        "RETURNING id, owner, thread_id",
                                        {instance, runner}));
      for (const SqlRow& q : rows) {
        RunRow run;
        run.id = SqlText(q[0]);
        run.owner = SqlText(q[1]);
        run.thread_id = SqlText(q[2]);
        queued.push_back(std::move(run));
      }
      SHARDLM_RETURN_IF_ERROR(tx.Exec("DELETE FROM instances WHERE id = ?", {runner}).status());
    }
    return absl::OkStatus();
  }));
  return queued;
}

}  // namespace shardlm
