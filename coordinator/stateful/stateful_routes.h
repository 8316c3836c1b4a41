// One stateful API call as its routes see it, and the routes
// (coordinator/stateful/stateful_api.h dispatches to them). Each answers the
// object to send, or a status: NOT_FOUND is a 404, INVALID_ARGUMENT a 400
// naming its field (common/status.h InvalidField).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/openai_wire/api_error.h"
#include "coordinator/stateful/kv_turns.h"
#include "state/store.h"

namespace shardlm {
namespace stateful {

using openai::Json;

struct StatefulCall {
  std::string owner;              // the key's hash ("" without keys): every object is the owner's
  std::string method;             // GET, POST or DELETE
  std::vector<std::string> path;  // the segments after /v1/: {"threads", "thread_x", "messages"}
  std::map<std::string, std::string> query;
  Json body = Json::object();  // POST: the request's object; else {}
  int64_t now_s = 0;
};

class RunExecutor;
class BackgroundResponses;

struct StatefulContext {
  StateStore* store = nullptr;
  RunExecutor* runs = nullptr;
  BackgroundResponses* background = nullptr;
  KvTurnCache* turns = nullptr;          // deleting a thread, response or conversation releases its KV
  std::vector<std::string> model_names;  // what "model" may name
};

// NOT_FOUND "Invalid URL (METHOD /v1/...)", as OpenAI answers a path it does not serve.
absl::Status InvalidUrl(const StatefulCall& call);

// A message of a create body as a row of thread `thread_id`. `param` names it in errors:
// "body" for a message create (its fields by their own names), "messages[i]" in a thread's.
absl::StatusOr<MessageRow> MessageFrom(const StatefulCall& call, const Json& body,
                                       const std::string& thread_id, const std::string& param);
// A thread create's body (`param` names it in errors; "" at the top level) as a thread and its messages.
absl::Status ThreadFrom(const StatefulCall& call, const Json& body, const std::string& param, ThreadRow* t,
                        std::vector<MessageRow>* messages);

// /v1/assistants...
absl::StatusOr<Json> AssistantsRoute(const StatefulContext& ctx, const StatefulCall& call);
// /v1/threads... (threads and their messages; runs go to RunsRoute)
absl::StatusOr<Json> ThreadsRoute(const StatefulContext& ctx, const StatefulCall& call);
// /v1/threads/runs and /v1/threads/{id}/runs...: runs (created queued, for the executor) and steps.
absl::StatusOr<Json> RunsRoute(const StatefulContext& ctx, const StatefulCall& call);
// A run queued by a create, a create-and-run or a submit_tool_outputs (with the tool step the
// outputs completed), stored but not handed to the executor: for a streamed run, which its
// request's thread executes.
struct QueuedRun {
  RunRow run;
  std::optional<RunStepRow> completed_step;
};
absl::StatusOr<QueuedRun> CreateRunFrom(const StatefulContext& ctx, const StatefulCall& call);
// /v1/responses/{id}...: retrieve, delete, input items, cancel.
absl::StatusOr<Json> ResponsesRoute(const StatefulContext& ctx, const StatefulCall& call);
// /v1/conversations...: conversations and their items.
absl::StatusOr<Json> ConversationsRoute(const StatefulContext& ctx, const StatefulCall& call);
// Whether `call` queues a run (POST /v1/threads/runs, /v1/threads/{id}/runs or
// /v1/threads/{id}/runs/{run_id}/submit_tool_outputs).
bool CreatesRun(const StatefulCall& call);

}  // namespace stateful
}  // namespace shardlm
