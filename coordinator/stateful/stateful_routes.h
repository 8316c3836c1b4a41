// One stateful API call as its routes see it, and the routes
// (coordinator/stateful/stateful_api.h dispatches to them). Each answers the
// object to send, or a status: NOT_FOUND is a 404, INVALID_ARGUMENT a 400
// naming its field (common/status.h InvalidField).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/openai_wire/api_error.h"
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

struct StatefulContext {
  StateStore* store = nullptr;
  std::vector<std::string> model_names;  // what "model" may name
};

// NOT_FOUND "Invalid URL (METHOD /v1/...)", as OpenAI answers a path it does not serve.
absl::Status InvalidUrl(const StatefulCall& call);

// /v1/assistants...
absl::StatusOr<Json> AssistantsRoute(const StatefulContext& ctx, const StatefulCall& call);
// /v1/threads... (threads and their messages)
absl::StatusOr<Json> ThreadsRoute(const StatefulContext& ctx, const StatefulCall& call);

}  // namespace stateful
}  // namespace shardlm
