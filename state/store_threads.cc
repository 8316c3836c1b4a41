// StateStore's threads and messages.
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "state/list_rows.h"
#include "state/store.h"
#include "state/store_internal.h"

namespace shardlm {
namespace {

constexpr char kThreadColumns[] = "id, owner, seq, created_at, metadata, version";
constexpr char kMessageColumns[] =
    "id, owner, seq, created_at, thread_id, role, content, status, assistant_id, run_id, metadata, "
    "completed_at, incomplete_at, incomplete_reason";

ThreadRow ThreadOf(const SqlRow& r) {
  ThreadRow t;
  t.id = SqlText(r[0]);
  t.owner = SqlText(r[1]);
  t.seq = SqlInt(r[2]);
  t.created_at = SqlInt(r[3]);
  t.metadata = SqlText(r[4]);
  t.version = SqlInt(r[5]);
  return t;
}

MessageRow MessageOf(const SqlRow& r) {
  MessageRow m;
  m.id = SqlText(r[0]);
  m.owner = SqlText(r[1]);
  m.seq = SqlInt(r[2]);
  m.created_at = SqlInt(r[3]);
  m.thread_id = SqlText(r[4]);
  m.role = SqlText(r[5]);
  m.content = SqlText(r[6]);
  m.status = SqlText(r[7]);
  m.assistant_id = SqlOptText(r[8]);
  m.run_id = SqlOptText(r[9]);
  m.metadata = SqlText(r[10]);
  m.completed_at = SqlOptInt(r[11]);
  m.incomplete_at = SqlOptInt(r[12]);
  m.incomplete_reason = SqlOptText(r[13]);
  return m;
}

}  // namespace

absl::Status InsertMessage(SqlTx& tx, MessageRow* m) {
  SHARDLM_ASSIGN_OR_RETURN(m->seq, NextSeq(tx));
  return tx
      .Exec(absl::StrCat("INSERT INTO messages (", kMessageColumns,
                         ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
            {m->id, m->owner, m->seq, m->created_at, m->thread_id, m->role, m->content, m->status,
             SqlOptional(m->assistant_id), SqlOptional(m->run_id), m->metadata, SqlOptional(m->completed_at),
             SqlOptional(m->incomplete_at), SqlOptional(m->incomplete_reason)})
      .status();
}

absl::Status BumpThread(SqlTx& tx, const std::string& owner, const std::string& thread_id) {
  SHARDLM_ASSIGN_OR_RETURN(
      int64_t changed,
      tx.Exec("UPDATE threads SET version = version + 1 WHERE owner = ? AND id = ?", {owner, thread_id}));
  return changed == 1 ? absl::OkStatus() : NotFoundObject("thread", thread_id);
}

absl::Status InsertThread(SqlTx& tx, ThreadRow* thread) {
  SHARDLM_ASSIGN_OR_RETURN(thread->seq, NextSeq(tx));
  return tx
      .Exec(absl::StrCat("INSERT INTO threads (", kThreadColumns, ") VALUES (?, ?, ?, ?, ?, ?)"),
            {thread->id, thread->owner, thread->seq, thread->created_at, thread->metadata, thread->version})
      .status();
}

absl::Status StateStore::CreateThread(ThreadRow* thread, std::vector<MessageRow>* messages) {
  return db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_RETURN_IF_ERROR(InsertThread(tx, thread));
    for (MessageRow& m : *messages) SHARDLM_RETURN_IF_ERROR(InsertMessage(tx, &m));
    return absl::OkStatus();
  });
}

absl::StatusOr<ThreadRow> StateStore::GetThread(const std::string& owner, const std::string& id) {
  ThreadRow out;
  SHARDLM_RETURN_IF_ERROR(db_->Read([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> rows,
        tx.Query(absl::StrCat("SELECT ", kThreadColumns, " FROM threads WHERE owner = ? AND id = ?"),
                 {owner, id}));
    if (rows.empty()) return NotFoundObject("thread", id);
    out = ThreadOf(rows[0]);
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<ThreadRow> StateStore::UpdateThreadMetadata(const std::string& owner, const std::string& id,
                                                           const std::string& metadata) {
  ThreadRow out;
  SHARDLM_RETURN_IF_ERROR(db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> rows,
        tx.Query(absl::StrCat("UPDATE threads SET metadata = ? WHERE owner = ? AND id = ? RETURNING ",
                              kThreadColumns),
                 {metadata, owner, id}));
    if (rows.empty()) return NotFoundObject("thread", id);
    out = ThreadOf(rows[0]);
    return absl::OkStatus();
  }));
  return out;
}

absl::Status StateStore::DeleteThread(const std::string& owner, const std::string& id) {
  return db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(int64_t changed,
                             tx.Exec("DELETE FROM threads WHERE owner = ? AND id = ?", {owner, id}));
    return changed == 1 ? absl::OkStatus() : NotFoundObject("thread", id);
  });
}

absl::Status StateStore::CreateMessage(MessageRow* row) {
  return db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_RETURN_IF_ERROR(BumpThread(tx, row->owner, row->thread_id));
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> active,
        tx.Query(absl::StrCat("SELECT id FROM runs WHERE thread_id = ? AND status IN ", kActiveRunStatuses),
                 {row->thread_id}));
    if (!active.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Can't add messages to ", row->thread_id, " while a run ", SqlText(active[0][0]), " is active."));
    }
    return InsertMessage(tx, row);
  });
}

absl::StatusOr<std::vector<MessageRow>> StateStore::ThreadHistory(const std::string& owner,
                                                                  const std::string& thread_id) {
  std::vector<MessageRow> out;
  SHARDLM_RETURN_IF_ERROR(db_->Read([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> rows,
        tx.Query(absl::StrCat("SELECT ", kMessageColumns,
                              " FROM messages WHERE owner = ? AND thread_id = ? ORDER BY seq ASC"),
                 {owner, thread_id}));
    for (const SqlRow& r : rows) out.push_back(MessageOf(r));
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<MessageRow> StateStore::GetMessage(const std::string& owner, const std::string& thread_id,
                                                  const std::string& id) {
  MessageRow out;
  SHARDLM_RETURN_IF_ERROR(db_->Read([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> rows,
        tx.Query(absl::StrCat("SELECT ", kMessageColumns,
                              " FROM messages WHERE owner = ? AND thread_id = ? AND id = ?"),
                 {owner, thread_id, id}));
    if (rows.empty()) return NotFoundObject("message", id);
    out = MessageOf(rows[0]);
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<MessageRow> StateStore::UpdateMessageMetadata(const std::string& owner,
                                                             const std::string& thread_id,
                                                             const std::string& id,
                                                             const std::string& metadata) {
  MessageRow out;
  SHARDLM_RETURN_IF_ERROR(db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> rows,
        tx.Query(absl::StrCat("UPDATE messages SET metadata = ? WHERE owner = ? AND thread_id = ? AND id = ? "
                              "RETURNING ",
                              kMessageColumns),
                 {metadata, owner, thread_id, id}));
    if (rows.empty()) return NotFoundObject("message", id);
    out = MessageOf(rows[0]);
    return absl::OkStatus();
  }));
  return out;
}

absl::Status StateStore::DeleteMessage(const std::string& owner, const std::string& thread_id,
                                       const std::string& id) {
  return db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_RETURN_IF_ERROR(BumpThread(tx, owner, thread_id));
    SHARDLM_ASSIGN_OR_RETURN(
        int64_t changed,
        tx.Exec("DELETE FROM messages WHERE owner = ? AND thread_id = ? AND id = ?", {owner, thread_id, id}));
    return changed == 1 ? absl::OkStatus() : NotFoundObject("message", id);
  });
}

absl::StatusOr<ListPage<MessageRow>> StateStore::ListMessages(const std::string& owner,
                                                              const std::string& thread_id,
                                                              const std::optional<std::string>& run_id,
                                                              const ListQuery& q) {
  ListPage<MessageRow> page;
  SHARDLM_RETURN_IF_ERROR(db_->Read([&](SqlTx& tx) -> absl::Status {
    // A thread another key owns (or none) is NOT_FOUND, not an empty list.
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> found,
        tx.Query("SELECT id FROM threads WHERE owner = ? AND id = ?", {owner, thread_id}));
    if (found.empty()) return NotFoundObject("thread", thread_id);
    std::string where = "owner = ? AND thread_id = ?";
    std::vector<SqlValue> params = {owner, thread_id};
    if (run_id) {
      where += " AND run_id = ?";
      params.emplace_back(*run_id);
    }
    SHARDLM_ASSIGN_OR_RETURN(std::vector<SqlRow> rows,
                             ListRows(tx, "messages", kMessageColumns, where, params, q, &page.has_more));
    for (const SqlRow& r : rows) page.rows.push_back(MessageOf(r));
    return absl::OkStatus();
  }));
  return page;
}

}  // namespace shardlm
