// StateStore's assistants.
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "state/list_rows.h"
#include "state/store.h"

namespace shardlm {
namespace {

constexpr char kColumns[] =
    "id, owner, seq, created_at, model, name, description, instructions, tools, response_format, "
    "temperature, "
    "top_p, metadata";

AssistantRow AssistantOf(const SqlRow& r) {
  AssistantRow a;
  a.id = SqlText(r[0]);
  a.owner = SqlText(r[1]);
  a.seq = SqlInt(r[2]);
  a.created_at = SqlInt(r[3]);
  a.model = SqlText(r[4]);
  a.name = SqlOptText(r[5]);
  a.description = SqlOptText(r[6]);
  a.instructions = SqlOptText(r[7]);
  a.tools = SqlText(r[8]);
  a.response_format = SqlOptText(r[9]);
  a.temperature = SqlOptDouble(r[10]);
  a.top_p = SqlOptDouble(r[11]);
  a.metadata = SqlText(r[12]);
  return a;
}

}  // namespace

absl::Status StateStore::CreateAssistant(AssistantRow* row) {
  return db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(row->seq, NextSeq(tx));
    return tx
        .Exec(absl::StrCat("INSERT INTO assistants (", kColumns,
                           ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
              {row->id, row->owner, row->seq, row->created_at, row->model, SqlOptional(row->name),
               SqlOptional(row->description), SqlOptional(row->instructions), row->tools,
               SqlOptional(row->response_format), SqlOptional(row->temperature), SqlOptional(row->top_p),
               row->metadata})
        .status();
  });
}

absl::StatusOr<AssistantRow> StateStore::GetAssistant(const std::string& owner, const std::string& id) {
  AssistantRow out;
  SHARDLM_RETURN_IF_ERROR(db_->Read([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> rows,
        tx.Query(absl::StrCat("SELECT ", kColumns, " FROM assistants WHERE owner = ? AND id = ?"),
                 {owner, id}));
    if (rows.empty()) return NotFoundObject("assistant", id);
    out = AssistantOf(rows[0]);
    return absl::OkStatus();
  }));
  return out;
}

absl::Status StateStore::UpdateAssistant(const AssistantRow& row) {
  return db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(
        int64_t changed,
        tx.Exec("UPDATE assistants SET model = ?, name = ?, description = ?, instructions = ?, tools = ?, "
                "response_format = ?, temperature = ?, top_p = ?, metadata = ? WHERE owner = ? AND id = ?",
                {row.model, SqlOptional(row.name), SqlOptional(row.description),
                 SqlOptional(row.instructions), row.tools, SqlOptional(row.response_format),
                 SqlOptional(row.temperature), SqlOptional(row.top_p), row.metadata, row.owner, row.id}));
    return changed == 1 ? absl::OkStatus() : NotFoundObject("assistant", row.id);
  });
}

absl::Status StateStore::DeleteAssistant(const std::string& owner, const std::string& id) {
  return db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(int64_t changed,
                             tx.Exec("DELETE FROM assistants WHERE owner = ? AND id = ?", {owner, id}));
    return changed == 1 ? absl::OkStatus() : NotFoundObject("assistant", id);
  });
}

absl::StatusOr<ListPage<AssistantRow>> StateStore::ListAssistants(const std::string& owner,
                                                                  const ListQuery& q) {
  ListPage<AssistantRow> page;
  SHARDLM_RETURN_IF_ERROR(db_->Read([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(std::vector<SqlRow> rows,
                             ListRows(tx, "assistants", kColumns, "owner = ?", {owner}, q, &page.has_more));
    for (const SqlRow& r : rows) page.rows.push_back(AssistantOf(r));
    return absl::OkStatus();
  }));
  return page;
}

}  // namespace shardlm
