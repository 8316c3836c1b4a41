// StateStore's runs and run steps.
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "state/list_rows.h"
#include "state/store.h"
#include "state/store_internal.h"

namespace shardlm {
namespace {

constexpr char kRunColumns[] =
    "id, owner, seq, created_at, thread_id, assistant_id, status, runner, config, metadata, required_action, "
    "last_error, incomplete_reason, usage, started_at, expires_at, cancelled_at, failed_at, completed_at";
constexpr char kStepColumns[] =
    "id, owner, seq, created_at, run_id, thread_id, assistant_id, type, status, step_details, last_error, "
    "usage, "
    "completed_at, cancelled_at, failed_at, expired_at";

RunRow RunOf(const SqlRow& r) {
  RunRow run;
  run.id = SqlText(r[0]);
  run.owner = SqlText(r[1]);
  run.seq = SqlInt(r[2]);
  run.created_at = SqlInt(r[3]);
  run.thread_id = SqlText(r[4]);
  run.assistant_id = SqlText(r[5]);
  run.status = SqlText(r[6]);
  run.runner = SqlOptText(r[7]);
  run.config = SqlText(r[8]);
  run.metadata = SqlText(r[9]);
  run.required_action = SqlOptText(r[10]);
  run.last_error = SqlOptText(r[11]);
  run.incomplete_reason = SqlOptText(r[12]);
  run.usage = SqlOptText(r[13]);
  run.started_at = SqlOptInt(r[14]);
  run.expires_at = SqlOptInt(r[15]);
  run.cancelled_at = SqlOptInt(r[16]);
  run.failed_at = SqlOptInt(r[17]);
  run.completed_at = SqlOptInt(r[18]);
  return run;
}

RunStepRow StepOf(const SqlRow& r) {
  RunStepRow s;
  s.id = SqlText(r[0]);
  s.owner = SqlText(r[1]);
  s.seq = SqlInt(r[2]);
  s.created_at = SqlInt(r[3]);
  s.run_id = SqlText(r[4]);
  s.thread_id = SqlText(r[5]);
  s.assistant_id = SqlText(r[6]);
  s.type = SqlText(r[7]);
  s.status = SqlText(r[8]);
  s.step_details = SqlText(r[9]);
  s.last_error = SqlOptText(r[10]);
  s.usage = SqlOptText(r[11]);
  s.completed_at = SqlOptInt(r[12]);
  s.cancelled_at = SqlOptInt(r[13]);
  s.failed_at = SqlOptInt(r[14]);
  s.expired_at = SqlOptInt(r[15]);
  return s;
}

// Inserts the run; a thread that has an active one already is FAILED_PRECONDITION naming it.
absl::Status InsertRun(SqlTx& tx, RunRow* run) {
  SHARDLM_ASSIGN_OR_RETURN(
      std::vector<SqlRow> active,
      tx.Query(absl::StrCat("SELECT id FROM runs WHERE thread_id = ? AND status IN ", kActiveRunStatuses),
               {run->thread_id}));
  if (!active.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Thread ", run->thread_id, " already has an active run ", SqlText(active[0][0]), "."));
  }
  SHARDLM_ASSIGN_OR_RETURN(run->seq, NextSeq(tx));
  absl::Status st =
      tx.Exec(absl::StrCat("INSERT INTO runs (", kRunColumns,
                           ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
              {run->id, run->owner, run->seq, run->created_at, run->thread_id, run->assistant_id, run->status,
               SqlOptional(run->runner), run->config, run->metadata, SqlOptional(run->required_action),
               SqlOptional(run->last_error), SqlOptional(run->incomplete_reason), SqlOptional(run->usage),
               SqlOptional(run->started_at), SqlOptional(run->expires_at), SqlOptional(run->cancelled_at),
               SqlOptional(run->failed_at), SqlOptional(run->completed_at)})
          .status();
  // Another writer (another serve on the same database) won the race for the thread.
  if (absl::IsAlreadyExists(st)) {
    return absl::FailedPreconditionError(
        absl::StrCat("Thread ", run->thread_id, " already has an active run."));
  }
  return st;
}

absl::Status InsertStep(SqlTx& tx, RunStepRow* s) {
  SHARDLM_ASSIGN_OR_RETURN(s->seq, NextSeq(tx));
  return tx
      .Exec(absl::StrCat("INSERT INTO run_steps (", kStepColumns,
                         ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
            {s->id, s->owner, s->seq, s->created_at, s->run_id, s->thread_id, s->assistant_id, s->type,
             s->status, s->step_details, SqlOptional(s->last_error), SqlOptional(s->usage),
             SqlOptional(s->completed_at), SqlOptional(s->cancelled_at), SqlOptional(s->failed_at),
             SqlOptional(s->expired_at)})
      .status();
}

absl::StatusOr<RunRow> QueryRun(SqlTx& tx, const std::string& owner, const std::string& thread_id,
                                const std::string& id) {
  SHARDLM_ASSIGN_OR_RETURN(std::vector<SqlRow> rows,
                           tx.Query(absl::StrCat("SELECT ", kRunColumns,
                                                 " FROM runs WHERE owner = ? AND thread_id = ? AND id = ?"),
                                    {owner, thread_id, id}));
  if (rows.empty()) return NotFoundObject("run", id);
  return RunOf(rows[0]);
}

// The run as it is now, its row locked until the transaction ends (a no-op UPDATE: PostgreSQL's
// READ COMMITTED writers would otherwise decide on a status another one changes meanwhile;
// SQLite's writers run one at a time anyway). NOT_FOUND as QueryRun.
absl::StatusOr<RunRow> LockRun(SqlTx& tx, const std::string& owner, const std::string& thread_id,
                               const std::string& id) {
  SHARDLM_ASSIGN_OR_RETURN(
      int64_t locked, tx.Exec("UPDATE runs SET status = status WHERE owner = ? AND thread_id = ? AND id = ?",
                              {owner, thread_id, id}));
  if (locked == 0) return NotFoundObject("run", id);
  return QueryRun(tx, owner, thread_id, id);
}

}  // namespace

absl::Status StateStore::CreateRun(RunRow* run, std::vector<MessageRow>* additional) {
  return db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_RETURN_IF_ERROR(BumpThread(tx, run->owner, run->thread_id));
    SHARDLM_RETURN_IF_ERROR(InsertRun(tx, run));
    for (MessageRow& m : *additional) SHARDLM_RETURN_IF_ERROR(InsertMessage(tx, &m));
    return absl::OkStatus();
  });
}

absl::Status StateStore::CreateThreadAndRun(ThreadRow* thread, std::vector<MessageRow>* messages,
                                            RunRow* run) {
  return db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_RETURN_IF_ERROR(InsertThread(tx, thread));
    for (MessageRow& m : *messages) SHARDLM_RETURN_IF_ERROR(InsertMessage(tx, &m));
    return InsertRun(tx, run);
  });
}

absl::StatusOr<RunRow> StateStore::GetRun(const std::string& owner, const std::string& thread_id,
                                          const std::string& id) {
  RunRow out;
  SHARDLM_RETURN_IF_ERROR(db_->Read([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(out, QueryRun(tx, owner, thread_id, id));
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<ListPage<RunRow>> StateStore::ListRuns(const std::string& owner, const std::string& thread_id,
                                                      const ListQuery& q) {
  ListPage<RunRow> page;
  SHARDLM_RETURN_IF_ERROR(db_->Read([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> found,
        tx.Query("SELECT id FROM threads WHERE owner = ? AND id = ?", {owner, thread_id}));
    if (found.empty()) return NotFoundObject("thread", thread_id);
    SHARDLM_ASSIGN_OR_RETURN(std::vector<SqlRow> rows,
                             ListRows(tx, "runs", kRunColumns, "owner = ? AND thread_id = ?",
                                      {owner, thread_id}, q, &page.has_more));
    for (const SqlRow& r : rows) page.rows.push_back(RunOf(r));
    return absl::OkStatus();
  }));
  return page;
}

absl::StatusOr<RunRow> StateStore::UpdateRunMetadata(const std::string& owner, const std::string& thread_id,
                                                     const std::string& id, const std::string& metadata) {
  RunRow out;
  SHARDLM_RETURN_IF_ERROR(db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(
        int64_t changed, tx.Exec("UPDATE runs SET metadata = ? WHERE owner = ? AND thread_id = ? AND id = ?",
                                 {metadata, owner, thread_id, id}));
    if (changed == 0) return NotFoundObject("run", id);
    SHARDLM_ASSIGN_OR_RETURN(out, QueryRun(tx, owner, thread_id, id));
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<bool> StateStore::ClaimRun(const std::string& id, const std::string& runner, int64_t now_s) {
  int64_t changed = 0;
  SHARDLM_RETURN_IF_ERROR(db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(changed,
                             tx.Exec("UPDATE runs SET status = 'in_progress', started_at = ?, runner = ? "
                                     "WHERE id = ? AND status = 'queued'",
                                     {now_s, runner, id}));
    return absl::OkStatus();
  }));
  return changed == 1;
}

absl::StatusOr<RunRow> StateStore::CancelRun(const std::string& owner, const std::string& thread_id,
                                             const std::string& id, int64_t now_s) {
  RunRow out;
  SHARDLM_RETURN_IF_ERROR(db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(RunRow run, LockRun(tx, owner, thread_id, id));
    if (run.status == "queued" || run.status == "requires_action") {
      SHARDLM_RETURN_IF_ERROR(
          tx.Exec(
                "UPDATE runs SET status = 'cancelled', cancelled_at = ?, required_action = NULL WHERE id = ?",
                {now_s, id})
              .status());
      SHARDLM_RETURN_IF_ERROR(tx.Exec("UPDATE run_steps SET status = 'cancelled', cancelled_at = ? "
                                      "WHERE run_id = ? AND status = 'in_progress'",
                                      {now_s, id})
                                  .status());
    } else if (run.status == "in_progress") {
      SHARDLM_RETURN_IF_ERROR(tx.Exec("UPDATE runs SET status = 'cancelling' WHERE id = ?", {id}).status());
    } else if (run.status != "cancelling") {
      return absl::FailedPreconditionError(absl::StrCat("Cannot cancel run with status '", run.status, "'."));
    }
    SHARDLM_ASSIGN_OR_RETURN(out, QueryRun(tx, owner, thread_id, id));
    return absl::OkStatus();
  }));
  return out;
}

absl::Status StateStore::FinishRun(const RunEnd& end) {
  return db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> found,
        tx.Query("UPDATE runs SET status = status WHERE owner = ? AND id = ? RETURNING status",  // locks it
                 {end.owner, end.run_id}));
    if (found.empty()) return NotFoundObject("run", end.run_id);
    const std::string status = SqlText(found[0][0]);
    // Ended elsewhere meanwhile (reaped as its runner's instance looked dead): that end stands.
    if (status != "in_progress" && status != "cancelling") return absl::OkStatus();
    // A cancel that came as the reply ended: the calls are not asked for.
    const bool asks = end.status == "requires_action" && status == "in_progress";
    // In this order: a prompt shows the reply's text before its calls (by seq).
    if (end.step) {
      RunStepRow step = *end.step;
      SHARDLM_RETURN_IF_ERROR(InsertStep(tx, &step));
    }
    if (end.message) {
      MessageRow m = *end.message;
      SHARDLM_RETURN_IF_ERROR(InsertMessage(tx, &m));
    }
    if (asks && end.tool_step) {
      RunStepRow step = *end.tool_step;
      SHARDLM_RETURN_IF_ERROR(InsertStep(tx, &step));
    }
    const std::string new_status =
        end.status == "requires_action" && !asks ? std::string("cancelled") : end.status;
    const bool completed = new_status == "completed" || new_status == "incomplete";
    return tx
        .Exec(
            "UPDATE runs SET status = ?, last_error = ?, incomplete_reason = ?, usage = ?, completed_at = ?, "
            "cancelled_at = ?, failed_at = ?, required_action = ?, expires_at = COALESCE(?, expires_at) "
            "WHERE id = ?",
            {new_status, SqlOptional(end.last_error), SqlOptional(end.incomplete_reason),
             SqlOptional(end.usage), completed ? SqlValue(end.at) : SqlValue(),
             new_status == "cancelled" ? SqlValue(end.at) : SqlValue(),
             new_status == "failed" ? SqlValue(end.at) : SqlValue(),
             asks ? SqlOptional(end.required_action) : SqlValue(),
             asks ? SqlOptional(end.expires_at) : SqlValue(), end.run_id})
        .status();
  });
}

absl::StatusOr<std::pair<RunRow, RunStepRow>> StateStore::SubmitToolOutputs(
    const ToolOutputsSubmit& in,
    const std::function<absl::StatusOr<std::string>(const RunRow&, const RunStepRow&)>& fill) {
  std::pair<RunRow, RunStepRow> out;
  SHARDLM_RETURN_IF_ERROR(db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_RETURN_IF_ERROR(BumpThread(tx, in.owner, in.thread_id));
    SHARDLM_ASSIGN_OR_RETURN(RunRow run, LockRun(tx, in.owner, in.thread_id, in.run_id));
    if (run.status != "requires_action") {
      return absl::FailedPreconditionError(
          absl::StrCat("Runs in status \"", run.status, "\" do not accept tool outputs."));
    }
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> steps,
        tx.Query(absl::StrCat("SELECT ", kStepColumns,
                              " FROM run_steps WHERE run_id = ? AND type = 'tool_calls' AND status = "
                              "'in_progress' ORDER BY seq DESC LIMIT 1"),
                 {in.run_id}));
    if (steps.empty()) return absl::InternalError(absl::StrCat("run ", in.run_id, " has no open tool step"));
    RunStepRow step = StepOf(steps[0]);
    SHARDLM_ASSIGN_OR_RETURN(step.step_details, fill(run, step));
    step.status = "completed";
    step.completed_at = in.at;
    SHARDLM_RETURN_IF_ERROR(
        tx.Exec("UPDATE run_steps SET status = 'completed', completed_at = ?, step_details = ? WHERE id = ?",
                {in.at, step.step_details, step.id})
            .status());
    SHARDLM_RETURN_IF_ERROR(tx.Exec("UPDATE runs SET status = 'queued', required_action = NULL, runner = ?, "
                                    "expires_at = ? WHERE id = ?",
                                    {in.runner, in.expires_at, in.run_id})
                                .status());
    SHARDLM_ASSIGN_OR_RETURN(out.first, QueryRun(tx, in.owner, in.thread_id, in.run_id));
    out.second = std::move(step);
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::vector<RunStepRow>> StateStore::ThreadToolSteps(const std::string& owner,
                                                                    const std::string& thread_id) {
  std::vector<RunStepRow> out;
  SHARDLM_RETURN_IF_ERROR(db_->Read([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> rows,
        tx.Query(absl::StrCat("SELECT ", kStepColumns,
                              " FROM run_steps WHERE owner = ? AND thread_id = ? AND type = 'tool_calls' AND "
                              "status = 'completed' ORDER BY seq ASC"),
                 {owner, thread_id}));
    for (const SqlRow& r : rows) out.push_back(StepOf(r));
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::vector<std::string>> StateStore::RunsToStop(const std::string& runner) {
  std::vector<std::string> out;
  SHARDLM_RETURN_IF_ERROR(db_->Read([&](SqlTx& tx) -> absl::Status {
    out.clear();
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> rows,
        tx.Query("SELECT id FROM runs WHERE runner = ? AND status = 'cancelling'", {runner}));
    for (const SqlRow& r : rows) out.push_back(SqlText(r[0]));
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<int64_t> StateStore::ExpireRuns(int64_t now_s) {
  int64_t expired = 0;
  SHARDLM_RETURN_IF_ERROR(db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> rows,
        tx.Query("UPDATE runs SET status = 'expired' WHERE status IN ('queued', 'requires_action') AND "
                 "expires_at IS NOT NULL AND expires_at < ? RETURNING id",
                 {now_s}));
    for (const SqlRow& r : rows) {
      SHARDLM_RETURN_IF_ERROR(tx.Exec("UPDATE run_steps SET status = 'expired', expired_at = ? "
                                      "WHERE run_id = ? AND status = 'in_progress'",
                                      {now_s, SqlText(r[0])})
                                  .status());
    }
    expired = static_cast<int64_t>(rows.size());
    return absl::OkStatus();
  }));
  return expired;
}

absl::StatusOr<std::optional<std::string>> StateStore::ActiveRun(const std::string& owner,
                                                                 const std::string& thread_id) {
  std::optional<std::string> out;
  SHARDLM_RETURN_IF_ERROR(db_->Read([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> rows,
        tx.Query(absl::StrCat("SELECT id FROM runs WHERE owner = ? AND thread_id = ? AND status IN ",
                              kActiveRunStatuses),
                 {owner, thread_id}));
    if (!rows.empty()) out = SqlText(rows[0][0]);
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<ListPage<RunStepRow>> StateStore::ListRunSteps(const std::string& owner,
                                                              const std::string& thread_id,
                                                              const std::string& run_id, const ListQuery& q) {
  ListPage<RunStepRow> page;
  SHARDLM_RETURN_IF_ERROR(db_->Read([&](SqlTx& tx) -> absl::Status {
    SHARDLM_RETURN_IF_ERROR(QueryRun(tx, owner, thread_id, run_id).status());
    SHARDLM_ASSIGN_OR_RETURN(std::vector<SqlRow> rows,
                             ListRows(tx, "run_steps", kStepColumns, "owner = ? AND run_id = ?",
                                      {owner, run_id}, q, &page.has_more));
    for (const SqlRow& r : rows) page.rows.push_back(StepOf(r));
    return absl::OkStatus();
  }));
  return page;
}

absl::StatusOr<RunStepRow> StateStore::GetRunStep(const std::string& owner, const std::string& thread_id,
                                                  const std::string& run_id, const std::string& id) {
  RunStepRow out;
  SHARDLM_RETURN_IF_ERROR(db_->Read([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> rows,
        tx.Query(absl::StrCat("SELECT ", kStepColumns,
                              " FROM run_steps WHERE owner = ? AND thread_id = ? AND run_id = ? AND id = ?"),
                 {owner, thread_id, run_id, id}));
    if (rows.empty()) return NotFoundObject("run step", id);
    out = StepOf(rows[0]);
    return absl::OkStatus();
  }));
  return out;
}

}  // namespace shardlm
