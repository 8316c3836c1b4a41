// The state store's rows: what the tables hold, with no OpenAI shapes in them
// (JSON columns stay text; coordinator/stateful/ makes the clients' objects).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shardlm {

// Columns every table has.
struct RowKey {
  std::string id;
  std::string owner;       // a hash of the API key that made it; "" without keys
  int64_t seq = 0;         // set by the store: one counter over every table (list and history order)
  int64_t created_at = 0;  // Unix seconds
};

struct AssistantRow : RowKey {
  std::string model;
  std::optional<std::string> name, description, instructions;
  std::string tools = "[]";                    // JSON array
  std::optional<std::string> response_format;  // JSON; empty: "auto"
  std::optional<double> temperature, top_p;
  std::string metadata = "{}";  // JSON object of strings
};

struct ThreadRow : RowKey {
  std::string metadata = "{}";
  int64_t version = 0;  // bumped by every change to the thread's history
};

struct MessageRow : RowKey {
  std::string thread_id;
  std::string role;            // "user" or "assistant"
  std::string content = "[]";  // JSON array of content parts
  std::string status = "completed";
  std::optional<std::string> assistant_id, run_id;
  std::string metadata = "{}";
  std::optional<int64_t> completed_at, incomplete_at;
  std::optional<std::string> incomplete_reason;
};

// Statuses of a run that is not over: at most one per thread.
inline constexpr char kActiveRunStatuses[] = "('queued', 'in_progress', 'requires_action', 'cancelling')";

struct RunRow : RowKey {
  std::string thread_id;
  std::string assistant_id;
  std::string status = "queued";      // queued in_progress requires_action cancelling cancelled failed
                                      // completed incomplete expired
  std::optional<std::string> runner;  // the serve instance running it
  std::string config = "{}";          // JSON: what it runs with, fixed at creation
  std::string metadata = "{}";
  std::optional<std::string> required_action, last_error, incomplete_reason, usage;  // JSON but the reason
  std::optional<int64_t> started_at, expires_at, cancelled_at, failed_at, completed_at;
};

struct RunStepRow : RowKey {
  std::string run_id, thread_id, assistant_id;
  std::string type = "message_creation";
  std::string status = "completed";
  std::string step_details = "{}";  // JSON
  std::optional<std::string> last_error, usage;
  std::optional<int64_t> completed_at, cancelled_at, failed_at, expired_at;
};

// How a generation ended, written in one transaction: the run's new status
// and what it made (a message and its step, when there is text or an end to report;
// a tool_calls step, when the reply called functions).
struct RunEnd {
  std::string owner, run_id;
  std::string status;  // completed incomplete cancelled failed requires_action
  std::optional<std::string> last_error, incomplete_reason, usage;
  std::optional<std::string> required_action;  // JSON, with requires_action
  std::optional<int64_t> expires_at;           // with requires_action: when it expires unanswered
  int64_t at = 0;
  std::optional<MessageRow> message;    // the assistant's reply
  std::optional<RunStepRow> step;       // its message_creation step
  std::optional<RunStepRow> tool_step;  // its tool_calls step, in progress until the outputs come
};

// Tool outputs submitted to a run that requires action: in one transaction the run is checked
// (still requires_action), its open tool_calls step is filled (`fill` makes the step's new
// details from the run and the step, or refuses) and completed, and the run is queued again.
struct ToolOutputsSubmit {
  std::string owner, thread_id, run_id, runner;
  int64_t at = 0, expires_at = 0;
};

struct ResponseRow : RowKey {
  std::string status = "in_progress";  // in_progress completed incomplete failed cancelled
  std::optional<std::string> runner, previous_response_id, conversation_id;
  std::string config = "{}";                                   // JSON: what it was asked with
  std::optional<std::string> usage, error, incomplete_reason;  // JSON but the reason
  std::optional<int64_t> completed_at;
};

// One input or output item of a response (a message, ...), as its JSON.
struct ResponseItemRow : RowKey {
  std::string response_id;
  std::string kind;  // "input" or "output"
  std::string item;  // JSON, with the same "id" as the row
};

// A conversation (the Conversations API): its items are the history of the responses made in it.
struct ConversationRow : RowKey {
  std::string metadata = "{}";
};

struct ConversationItemRow : RowKey {
  std::string conversation_id;
  std::string item;  // JSON, with the same "id" as the row
};

struct ResponseEnd {
  std::string owner, response_id;
  std::string status;  // completed incomplete failed cancelled
  std::optional<std::string> usage, error, incomplete_reason;
  int64_t at = 0;
  std::vector<ResponseItemRow> output;
  // With a conversation: what the response adds to it (its input, then its output), in the same
  // transaction; nothing when the conversation was deleted meanwhile.
  std::optional<std::string> conversation_id;
  std::vector<ConversationItemRow> conversation_items;
};

// A list request (cursor pagination): at most `limit` rows after or before the rows with those ids.
struct ListQuery {
  int limit = 20;
  bool ascending = false;
  std::string after, before;  // ids; empty: none
};

template <typename Row>
struct ListPage {
  std::vector<Row> rows;
  bool has_more = false;
};

}  // namespace shardlm
