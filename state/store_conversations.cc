// StateStore's conversations and their items.
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "state/list_rows.h"
#include "state/store.h"
#include "state/store_internal.h"

namespace shardlm {
namespace {

constexpr char kConversationColumns[] = "id, owner, seq, created_at, metadata";
constexpr char kConversationItemColumns[] = "id, owner, seq, created_at, conversation_id, item";

ConversationRow ConversationOf(const SqlRow& r) {
  ConversationRow out;
  out.id = SqlText(r[0]);
  out.owner = SqlText(r[1]);
  out.seq = SqlInt(r[2]);
  out.created_at = SqlInt(r[3]);
  out.metadata = SqlText(r[4]);
  return out;
}

ConversationItemRow ConversationItemOf(const SqlRow& r) {
  ConversationItemRow out;
  out.id = SqlText(r[0]);
  out.owner = SqlText(r[1]);
  out.seq = SqlInt(r[2]);
  out.created_at = SqlInt(r[3]);
  out.conversation_id = SqlText(r[4]);
  out.item = SqlText(r[5]);
  return out;
}

absl::StatusOr<bool> ConversationExists(SqlTx& tx, const std::string& owner, const std::string& id) {
  SHARDLM_ASSIGN_OR_RETURN(std::vector<SqlRow> rows,
                           tx.Query("SELECT id FROM conversations WHERE owner = ? AND id = ?", {owner, id}));
  return !rows.empty();
}

absl::Status NeedConversation(SqlTx& tx, const std::string& owner, const std::string& id) {
  SHARDLM_ASSIGN_OR_RETURN(bool exists, ConversationExists(tx, owner, id));
  return exists ? absl::OkStatus() : NotFoundObject("conversation", id);
}

}  // namespace

absl::StatusOr<bool> InsertConversationItems(SqlTx& tx, const std::string& owner,
                                             const std::string& conversation_id,
                                             std::vector<ConversationItemRow>* items) {
  SHARDLM_ASSIGN_OR_RETURN(bool exists, ConversationExists(tx, owner, conversation_id));
  if (!exists) return false;
  for (ConversationItemRow& item : *items) {
    SHARDLM_ASSIGN_OR_RETURN(item.seq, NextSeq(tx));
    SHARDLM_RETURN_IF_ERROR(tx.Exec(absl::StrCat("INSERT INTO conversation_items (", kConversationItemColumns,
                                                 ") VALUES (?, ?, ?, ?, ?, ?)"),
                                    {item.id, owner, item.seq, item.created_at, conversation_id, item.item})
                                .status());
  }
  return true;
}

absl::Status StateStore::CreateConversation(ConversationRow* conversation,
                                            std::vector<ConversationItemRow>* items) {
  return db_->Write([&](SqlTx& tx) -> absl::Status {
    ConversationRow& c = *conversation;
    SHARDLM_ASSIGN_OR_RETURN(c.seq, NextSeq(tx));
    SHARDLM_RETURN_IF_ERROR(
        tx.Exec(absl::StrCat("INSERT INTO conversations (", kConversationColumns, ") VALUES (?, ?, ?, ?, ?)"),
                {c.id, c.owner, c.seq, c.created_at, c.metadata})
            .status());
    return InsertConversationItems(tx, c.owner, c.id, items).status();
  });
}

absl::StatusOr<ConversationRow> StateStore::GetConversation(const std::string& owner, const std::string& id) {
  ConversationRow out;
  SHARDLM_RETURN_IF_ERROR(db_->Read([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(std::vector<SqlRow> rows,
                             tx.Query(absl::StrCat("SELECT ", kConversationColumns,
                                                   " FROM conversations WHERE owner = ? AND id = ?"),
                                      {owner, id}));
    if (rows.empty()) return NotFoundObject("conversation", id);
    out = ConversationOf(rows[0]);
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<ConversationRow> StateStore::UpdateConversationMetadata(const std::string& owner,
                                                                       const std::string& id,
                                                                       const std::string& metadata) {
  ConversationRow out;
  SHARDLM_RETURN_IF_ERROR(db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> rows,
        tx.Query(absl::StrCat("UPDATE conversations SET metadata = ? WHERE owner = ? AND id = ? RETURNING ",
                              kConversationColumns),
                 {metadata, owner, id}));
    if (rows.empty()) return NotFoundObject("conversation", id);
    out = ConversationOf(rows[0]);
    return absl::OkStatus();
  }));
  return out;
}

absl::Status StateStore::DeleteConversation(const std::string& owner, const std::string& id) {
  return db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(int64_t changed,
                             tx.Exec("DELETE FROM conversations WHERE owner = ? AND id = ?", {owner, id}));
    return changed == 1 ? absl::OkStatus() : NotFoundObject("conversation", id);
  });
}

absl::Status StateStore::AddConversationItems(const std::string& owner, const std::string& conversation_id,
                                              std::vector<ConversationItemRow>* items) {
  return db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(bool added, InsertConversationItems(tx, owner, conversation_id, items));
    return added ? absl::OkStatus() : NotFoundObject("conversation", conversation_id);
  });
}

absl::StatusOr<ConversationItemRow> StateStore::GetConversationItem(const std::string& owner,
                                                                    const std::string& conversation_id,
                                                                    const std::string& id) {
  ConversationItemRow out;
  SHARDLM_RETURN_IF_ERROR(db_->Read([&](SqlTx& tx) -> absl::Status {
    SHARDLM_RETURN_IF_ERROR(NeedConversation(tx, owner, conversation_id));
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> rows,
        tx.Query(absl::StrCat("SELECT ", kConversationItemColumns,
                              " FROM conversation_items WHERE owner = ? AND conversation_id = ? AND id = ?"),
                 {owner, conversation_id, id}));
    if (rows.empty()) return NotFoundObject("item", id);
    out = ConversationItemOf(rows[0]);
    return absl::OkStatus();
  }));
  return out;
}

absl::Status StateStore::DeleteConversationItem(const std::string& owner, const std::string& conversation_id,
                                                const std::string& id) {
  return db_->Write([&](SqlTx& tx) -> absl::Status {
    SHARDLM_RETURN_IF_ERROR(NeedConversation(tx, owner, conversation_id));
    SHARDLM_ASSIGN_OR_RETURN(
        int64_t changed,
        tx.Exec("DELETE FROM conversation_items WHERE owner = ? AND conversation_id = ? AND id = ?",
                {owner, conversation_id, id}));
    return changed == 1 ? absl::OkStatus() : NotFoundObject("item", id);
  });
}

absl::StatusOr<ListPage<ConversationItemRow>> StateStore::ListConversationItems(
    const std::string& owner, const std::string& conversation_id, const ListQuery& q) {
  ListPage<ConversationItemRow> page;
  SHARDLM_RETURN_IF_ERROR(db_->Read([&](SqlTx& tx) -> absl::Status {
    SHARDLM_RETURN_IF_ERROR(NeedConversation(tx, owner, conversation_id));
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> rows,
        ListRows(tx, "conversation_items", kConversationItemColumns, "owner = ? AND conversation_id = ?",
                 {owner, conversation_id}, q, &page.has_more));
    for (const SqlRow& r : rows) page.rows.push_back(ConversationItemOf(r));
    return absl::OkStatus();
  }));
  return page;
}

absl::StatusOr<std::vector<ConversationItemRow>> StateStore::ConversationHistory(
    const std::string& owner, const std::string& conversation_id) {
  std::vector<ConversationItemRow> out;
  SHARDLM_RETURN_IF_ERROR(db_->Read([&](SqlTx& tx) -> absl::Status {
    SHARDLM_RETURN_IF_ERROR(NeedConversation(tx, owner, conversation_id));
    SHARDLM_ASSIGN_OR_RETURN(
        std::vector<SqlRow> rows,
        tx.Query(
            absl::StrCat("SELECT ", kConversationItemColumns,
                         " FROM conversation_items WHERE owner = ? AND conversation_id = ? ORDER BY seq ASC"),
            {owner, conversation_id}));
    for (const SqlRow& r : rows) out.push_back(ConversationItemOf(r));
    return absl::OkStatus();
  }));
  return out;
}

}  // namespace shardlm
