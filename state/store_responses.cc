// StateStore's responses and their items.
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "state/list_rows.h"
#include "state/store.h"
#include "state/store_internal.h"

namespace shardlm {
namespace {

constexpr char kResponseColumns[] =
    "id, owner, seq, created_at, status, runner, previous_response_id, conversation_id, config, usage, "
    "error, "
    "incomplete_reason, completed_at";
constexpr char kItemColumns[] = "id, owner, seq, created_at, response_id, kind, item";

ResponseRow ResponseOf(const SqlRow& r) {
  ResponseRow out;
  out.id = SqlText(r[0]);
  out.owner = SqlText(r[1]);
  out.seq = SqlInt(r[2]);
  out.created_at = SqlInt(r[3]);
  out.status = SqlText(r[4]);
  out.runner = SqlOptText(r[5]);
  out.previous_response_id = SqlOptText(r[6]);
  out.conversation_id = SqlOptText(r[7]);
  out.config = SqlText(r[8]);
  out.usage = SqlOptText(r[9]);
  out.error = SqlOptText(r[10]);
  out.incomplete_reason = SqlOptText(r[11]);
  out.completed_at = SqlOptInt(r[12]);
  return out;
}

ResponseItemRow ItemOf(const SqlRow& r) {
  ResponseItemRow out;
  out.id = SqlText(r[0]);
  out.owner = SqlText(r[1]);
  out.seq = SqlInt(r[2]);
  out.created_at = SqlInt(r[3]);
  out.response_id = SqlText(r[4]);
  out.kind = SqlText(r[5]);
  out.item = SqlText(r[6]);
  return out;
}

absl::Status InsertItem(SqlTx& tx, ResponseItemRow item) {
  SHARDLM_ASSIGN_OR_RETURN(item.seq, NextSeq(tx));
  return tx
      .Exec(absl::StrCat("INSERT INTO response_items (", kItemColumns, ") VALUES (?, ?, ?, ?, ?, ?, ?)"),
            {item.id, item.owner, item.seq, item.created_at, item.response_id, item.kind, item.item})
      .status();
}

absl::Status Exists(SqlTx& tx, const std::string& owner, const std::string& id) {
  SHARDLM_ASSIGN_OR_RETURN(std::vector<SqlRow> rows,
                           tx.Query("SELECT id FROM responses WHERE owner = ? AND id = ?", {owner, id}));
  return rows.empty() ? NotFoundObject("response", id) : absl::OkStatus();
}

}  // namespace

absl::Status StateStore::CreateResponse(ResponseRow* response, std::vector<ResponseItemRow>* input) {
  return db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(response->seq, NextSeq(tx));
    ResponseRow& r = *response;
    SHARDLM_RETURN_IF_ERROR(tx.Exec(absl::StrCat("INSERT INTO responses (", kResponseColumns,
                                                 ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                                    {r.id, r.owner, r.seq, r.created_at, r.status, SqlOptional(r.runner),
                                     SqlOptional(r.previous_response_id), SqlOptional(r.conversation_id),
                                     r.config, SqlOptional(r.usage), SqlOptional(r.error),
                                     SqlOptional(r.incomplete_reason), SqlOptional(r.completed_at)})
                                .status());
    for (ResponseItemRow& item : *input) SHARDLM_RETURN_IF_ERROR(InsertItem(tx, item));
    return absl::OkStatus();
  });
}

absl::Status StateStore::FinishResponse(const ResponseEnd& end) {
  return db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(
        int64_t changed,
        tx.Exec(
            "UPDATE responses SET status = ?, usage = ?, error = ?, incomplete_reason = ?, completed_at = ? "
            "WHERE owner = ? AND id = ? AND status = 'in_progress'",
            {end.status, SqlOptional(end.usage), SqlOptional(end.error), SqlOptional(end.incomplete_reason),
             end.at, end.owner, end.response_id}));
    if (changed == 0) return absl::OkStatus();  // deleted or reaped meanwhile: that stands
    for (const ResponseItemRow& item : end.output) SHARDLM_RETURN_IF_ERROR(InsertItem(tx, item));
    if (!end.conversation_id) return absl::OkStatus();
    std::vector<ConversationItemRow> items = end.conversation_items;
    // A conversation deleted meanwhile takes nothing: the response stands alone.
    return InsertConversationItems(tx, end.owner, *end.conversation_id, &items).status();
  });
}

absl::StatusOr<bool> StateStore::CancelResponse(const std::string& owner, const std::string& id,
                                                int64_t now_s) {
  int64_t changed = 0;
  SHARDLM_RETURN_IF_ERROR(db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(changed, tx.Exec("UPDATE responses SET status = 'cancelled', completed_at = ? "
                                              "WHERE owner = ? AND id = ? AND status = 'in_progress'",
                                              {now_s, owner, id}));
    return absl::OkStatus();
  }));
  return changed == 1;
}

absl::StatusOr<ResponseRow> StateStore::GetResponse(const std::string& owner, const std::string& id) {
  ResponseRow out;
  SHARDLM_RETURN_IF_ERROR(db_->Read([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> rows,
        tx.Query(absl::StrCat("SELECT ", kResponseColumns, " FROM responses WHERE owner = ? AND id = ?"),
                 {owner, id}));
    if (rows.empty()) return NotFoundObject("response", id);
    out = ResponseOf(rows[0]);
    return absl::OkStatus();
  }));
  return out;
}

absl::Status StateStore::DeleteResponse(const std::string& owner, const std::string& id) {
  return db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(int64_t changed,
                             tx.Exec("DELETE FROM responses WHERE owner = ? AND id = ?", {owner, id}));
    return changed == 1 ? absl::OkStatus() : NotFoundObject("response", id);
  });
}

absl::StatusOr<std::vector<ResponseItemRow>> StateStore::ResponseItems(const std::string& owner,
                                                                       const std::string& id,
                                                                       const std::string& kind) {
  std::vector<ResponseItemRow> out;
  SHARDLM_RETURN_IF_ERROR(db_->Read([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> rows,
        tx.Query(
            absl::StrCat(
                "SELECT ", kItemColumns,
                " FROM response_items WHERE owner = ? AND response_id = ? AND kind = ? ORDER BY seq ASC"),
            {owner, id, kind}));
    for (const SqlRow& r : rows) out.push_back(ItemOf(r));
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<ListPage<ResponseItemRow>> StateStore::ListResponseItems(const std::string& owner,
                                                                        const std::string& id,
                                                                        const std::string& kind,
                                                                        const ListQuery& q) {
  ListPage<ResponseItemRow> page;
  SHARDLM_RETURN_IF_ERROR(db_->Read([&](SqlTx& tx) -> absl::Status {
    SHARDLM_RETURN_IF_ERROR(Exists(tx, owner, id));
    SHARDLM_ASSIGN_OR_RETURN(std::vector<SqlRow> rows, ListRows(tx, "response_items", kItemColumns,
                                                                "owner = ? AND response_id = ? AND kind = ?",
                                                                {owner, id, kind}, q, &page.has_more));
    for (const SqlRow& r : rows) page.rows.push_back(ItemOf(r));
    return absl::OkStatus();
  }));
  return page;
}

absl::StatusOr<std::vector<ResponseItemRow>> StateStore::ResponseChain(const std::string& owner,
                                                                       const std::string& id) {
  std::vector<ResponseItemRow> out;
  SHARDLM_RETURN_IF_ERROR(db_->Read([&](SqlTx& tx) -> absl::Status {
    SHARDLM_RETURN_IF_ERROR(Exists(tx, owner, id));
    // The chain walks previous_response_id up to the first response (or a deleted one); its
    // items come oldest response first, each response's input before its output (by seq).
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> rows,
        tx.Query("WITH RECURSIVE chain (id, depth) AS ("
                 "  SELECT id, 0 FROM responses WHERE owner = ? AND id = ?"
                 "  UNION ALL"
                 "  SELECT r.previous_response_id, c.depth + 1 FROM responses r JOIN chain c ON r.id = c.id"
                 "  WHERE r.previous_response_id IS NOT NULL AND c.depth < 10000)"
                 " SELECT i.id, i.owner, i.seq, i.created_at, i.response_id, i.kind, i.item"
                 " FROM chain c JOIN response_items i ON i.response_id = c.id"
                 " WHERE i.owner = ? ORDER BY c.depth DESC, i.seq ASC",
                 {owner, id, owner}));
    for (const SqlRow& r : rows) out.push_back(ItemOf(r));
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::vector<std::string>> StateStore::CancelledResponses(const std::vector<std::string>& ids) {
  std::vector<std::string> out;
  if (ids.empty()) return out;
  std::string marks;
  std::vector<SqlValue> params;
  for (const std::string& id : ids) {
    absl::StrAppend(&marks, marks.empty() ? "?" : ", ?");
    params.emplace_back(id);
  }
  SHARDLM_RETURN_IF_ERROR(db_->Read([&](SqlTx& tx) -> absl::Status {
    out.clear();
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> rows,
        tx.Query(absl::StrCat("SELECT id FROM responses WHERE status = 'cancelled' AND id IN (", marks, ")"),
                 params));
    for (const SqlRow& r : rows) out.push_back(SqlText(r[0]));
    return absl::OkStatus();
  }));
  return out;
}

}  // namespace shardlm
