// The stateful APIs' objects in a database (docs/stateful_apis.md sections 3
// and 8): one method per read or compound write, each one transaction, each
// statement the same text on every backend. Every statement is scoped by
// `owner`: another key's object is NOT_FOUND, worded as an unknown id.
//
//   SHARDLM_ASSIGN_OR_RETURN(auto db, OpenSqlDb(url));
//   SHARDLM_ASSIGN_OR_RETURN(auto store, StateStore::Open(std::move(db), now_s));
//   AssistantRow a;  a.id = ...; a.owner = ...; a.model = ...;
//   SHARDLM_RETURN_IF_ERROR(store->CreateAssistant(&a));   // sets a.seq
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "state/rows.h"
#include "state/sql_db.h"

namespace shardlm {

class StateStore {
 public:
  // Migrates `db` (migrations.h) and keeps it.
  static absl::StatusOr<std::unique_ptr<StateStore>> Open(std::unique_ptr<SqlDb> db, int64_t now_s);

  int64_t schema_version() const { return schema_version_; }
  std::string Describe() const { return db_->Describe(); }

  // Assistants.
  absl::Status CreateAssistant(AssistantRow* row);
  absl::StatusOr<AssistantRow> GetAssistant(const std::string& owner, const std::string& id);
  absl::Status UpdateAssistant(const AssistantRow& row);  // every column but the common ones
  absl::Status DeleteAssistant(const std::string& owner, const std::string& id);
  absl::StatusOr<ListPage<AssistantRow>> ListAssistants(const std::string& owner, const ListQuery& q);

  // Threads; creating one stores its first messages with it.
  absl::Status CreateThread(ThreadRow* thread, std::vector<MessageRow>* messages);
  absl::StatusOr<ThreadRow> GetThread(const std::string& owner, const std::string& id);
  absl::StatusOr<ThreadRow> UpdateThreadMetadata(const std::string& owner, const std::string& id,
                                                 const std::string& metadata);
  // Deletes the thread with its messages (ON DELETE CASCADE).
  absl::Status DeleteThread(const std::string& owner, const std::string& id);

  // Messages. Adding or deleting one bumps its thread's version.
  absl::Status CreateMessage(MessageRow* row);
  absl::StatusOr<MessageRow> GetMessage(const std::string& owner, const std::string& thread_id,
                                        const std::string& id);
  absl::StatusOr<MessageRow> UpdateMessageMetadata(const std::string& owner, const std::string& thread_id,
                                                   const std::string& id, const std::string& metadata);
  absl::Status DeleteMessage(const std::string& owner, const std::string& thread_id, const std::string& id);
  // A thread's messages; with run_id, only that run's.
  absl::StatusOr<ListPage<MessageRow>> ListMessages(const std::string& owner, const std::string& thread_id,
                                                    const std::optional<std::string>& run_id,
                                                    const ListQuery& q);
  // A thread's messages, oldest first: what a run's prompt is made of.
  absl::StatusOr<std::vector<MessageRow>> ThreadHistory(const std::string& owner,
                                                        const std::string& thread_id);

  // Runs (store_runs.cc). Creating one stores its additional messages first;
  // a thread with an active run refuses another (FAILED_PRECONDITION naming it).
  absl::Status CreateRun(RunRow* run, std::vector<MessageRow>* additional);
  absl::Status CreateThreadAndRun(ThreadRow* thread, std::vector<MessageRow>* messages, RunRow* run);
  absl::StatusOr<RunRow> GetRun(const std::string& owner, const std::string& thread_id,
                                const std::string& id);
  absl::StatusOr<ListPage<RunRow>> ListRuns(const std::string& owner, const std::string& thread_id,
                                            const ListQuery& q);
  absl::StatusOr<RunRow> UpdateRunMetadata(const std::string& owner, const std::string& thread_id,
                                           const std::string& id, const std::string& metadata);
  // queued -> in_progress on `runner`; false when the run is queued no more (cancelled meanwhile).
  absl::StatusOr<bool> ClaimRun(const std::string& id, const std::string& runner, int64_t now_s);
  // queued -> cancelled at once; in_progress -> cancelling (its runner stops it); otherwise
  // FAILED_PRECONDITION ("Cannot cancel run with status 'completed'.").
  absl::StatusOr<RunRow> CancelRun(const std::string& owner, const std::string& thread_id,
                                   const std::string& id, int64_t now_s);
  // The end of a generation, in one transaction: the reply and its step, then the run's
  // status. NOT_FOUND when the run was deleted (with its thread) meanwhile; nothing is
  // written when it ended elsewhere (reaped).
  absl::Status FinishRun(const RunEnd& end);
  // Tool outputs (ToolOutputsSubmit): returns the queued run and its completed tool step.
  // FAILED_PRECONDITION when the run does not require action; `fill`'s error as it is.
  absl::StatusOr<std::pair<RunRow, RunStepRow>> SubmitToolOutputs(
      const ToolOutputsSubmit& submit,
      const std::function<absl::StatusOr<std::string>(const RunRow&, const RunStepRow&)>& fill);
  // The thread's completed tool_calls steps, oldest first (a run's prompt shows each call with
  // its outputs, in order among the messages).
  absl::StatusOr<std::vector<RunStepRow>> ThreadToolSteps(const std::string& owner,
                                                          const std::string& thread_id);
  // The runs `runner` generates that a cancel through another serve marked cancelling.
  absl::StatusOr<std::vector<std::string>> RunsToStop(const std::string& runner);
  // Of the responses `ids`, those a cancel (through any serve) ended.
  absl::StatusOr<std::vector<std::string>> CancelledResponses(const std::vector<std::string>& ids);
  // Runs queued or requiring action past their expires_at: expired, with their open steps.
  // Returns how many.
  absl::StatusOr<int64_t> ExpireRuns(int64_t now_s);
  absl::StatusOr<ListPage<RunStepRow>> ListRunSteps(const std::string& owner, const std::string& thread_id,
                                                    const std::string& run_id, const ListQuery& q);
  absl::StatusOr<RunStepRow> GetRunStep(const std::string& owner, const std::string& thread_id,
                                        const std::string& run_id, const std::string& id);

  // Responses (store_responses.cc): stored in progress with their input items, then ended
  // with their output items in one transaction.
  absl::Status CreateResponse(ResponseRow* response, std::vector<ResponseItemRow>* input);
  absl::Status FinishResponse(const ResponseEnd& end);
  absl::StatusOr<ResponseRow> GetResponse(const std::string& owner, const std::string& id);
  // in_progress -> cancelled (a background response generating on a serve that is gone, or on
  // another one: its end, when it comes, is not written); false when it was not in progress.
  absl::StatusOr<bool> CancelResponse(const std::string& owner, const std::string& id, int64_t now_s);
  // Deletes it with its items (a later response naming it as previous starts after the gap).
  absl::Status DeleteResponse(const std::string& owner, const std::string& id);
  // Its items of `kind`, oldest first.
  absl::StatusOr<std::vector<ResponseItemRow>> ResponseItems(const std::string& owner, const std::string& id,
                                                             const std::string& kind);
  absl::StatusOr<ListPage<ResponseItemRow>> ListResponseItems(const std::string& owner, const std::string& id,
                                                              const std::string& kind, const ListQuery& q);
  // Every item (input, then output, per response) of the chain that ends at response `id`,
  // oldest response first, in one recursive query; NOT_FOUND naming `id` when the owner has
  // no such response.
  absl::StatusOr<std::vector<ResponseItemRow>> ResponseChain(const std::string& owner, const std::string& id);

  // Conversations (store_conversations.cc); creating one stores its first items with it, and
  // deleting one deletes its items (ON DELETE CASCADE).
  absl::Status CreateConversation(ConversationRow* conversation, std::vector<ConversationItemRow>* items);
  absl::StatusOr<ConversationRow> GetConversation(const std::string& owner, const std::string& id);
  absl::StatusOr<ConversationRow> UpdateConversationMetadata(const std::string& owner, const std::string& id,
                                                             const std::string& metadata);
  absl::Status DeleteConversation(const std::string& owner, const std::string& id);
  // Appends items (setting their seq); NOT_FOUND naming the conversation when the owner has none.
  absl::Status AddConversationItems(const std::string& owner, const std::string& conversation_id,
                                    std::vector<ConversationItemRow>* items);
  absl::StatusOr<ConversationItemRow> GetConversationItem(const std::string& owner,
                                                          const std::string& conversation_id,
                                                          const std::string& id);
  absl::Status DeleteConversationItem(const std::string& owner, const std::string& conversation_id,
                                      const std::string& id);
  absl::StatusOr<ListPage<ConversationItemRow>> ListConversationItems(const std::string& owner,
                                                                      const std::string& conversation_id,
                                                                      const ListQuery& q);
  // Every item, oldest first: the history a response in the conversation is prompted with.
  absl::StatusOr<std::vector<ConversationItemRow>> ConversationHistory(const std::string& owner,
                                                                       const std::string& conversation_id);

  // The thread's active run, if any.
  absl::StatusOr<std::optional<std::string>> ActiveRun(const std::string& owner,
                                                       const std::string& thread_id);

  // Serve instances (store_instances.cc): each heartbeats while it runs runs.
  absl::Status Heartbeat(const std::string& instance, const std::string& host, int64_t pid, int64_t now_s);
  // A clean stop: nothing of the instance's is left to reap.
  absl::Status RemoveInstance(const std::string& instance);
  // The active runs of instances that stopped (no heartbeat since `stale_before_s`, or on this
  // host with their pid gone): in_progress -> failed ("the server running this run stopped"),
  // cancelling -> cancelled; queued runs move to `instance` and are returned, to be run.
  absl::StatusOr<std::vector<RunRow>> ReapRuns(const std::string& instance, const std::string& host,
                                               int64_t now_s, int64_t stale_before_s,
                                               const std::function<bool(int64_t pid)>& pid_alive);

 private:
  StateStore(std::unique_ptr<SqlDb> db, int64_t schema_version)
      : db_(std::move(db)), schema_version_(schema_version) {}

  std::unique_ptr<SqlDb> db_;
  int64_t schema_version_ = 0;
};

// NOT_FOUND as OpenAI words it: "No thread found with id 'thread_x'."
absl::Status NotFoundObject(const std::string& kind, const std::string& id);

}  // namespace shardlm
