// Statements the StateStore's files share inside one transaction (not part of its interface).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "state/rows.h"
#include "state/sql_db.h"

namespace shardlm {

// Inserts the message (setting its seq).
absl::Status InsertMessage(SqlTx& tx, MessageRow* m);
// Inserts the thread (setting its seq).
absl::Status InsertThread(SqlTx& tx, ThreadRow* thread);
// Bumps the thread's version (a change to its history), which also takes its
// row's lock first; NOT_FOUND when the owner has no such thread.
absl::Status BumpThread(SqlTx& tx, const std::string& owner, const std::string& thread_id);
// Inserts the conversation's items (setting their seq), when the owner has that conversation:
// false when it does not (deleted, or never there), and nothing is inserted.
absl::StatusOr<bool> InsertConversationItems(SqlTx& tx, const std::string& owner,
                                             const std::string& conversation_id,
                                             std::vector<ConversationItemRow>* items);

}  // namespace shardlm
