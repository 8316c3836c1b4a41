// The items of the Responses and Conversations APIs (docs/stateful_apis.md
// sections 5 and 7): an input item checked and made ready to store (a message,
// a function call, a function call's output), the items of a history as chat
// turns, and the function tools a response offers.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/openai_wire/api_error.h"

namespace shardlm {
namespace stateful {

using openai::Json;

// One input item as stored, with a new id. A message keeps its text parts (input_text, or
// output_text for the assistant); a function_call has call_id, name and arguments; a
// function_call_output has call_id and output. `param` names it in errors ("input[2]",
// "items[0]").
absl::StatusOr<Json> InputItem(const Json& item, const std::string& param);

// Stored items as chat turns, oldest first: messages as {role, content} ("developer" is the
// system role), a run of function calls as one assistant turn with tool_calls (joined to the
// assistant message just before them), each output as a tool turn.
std::vector<Json> TurnsOf(const std::vector<Json>& items);

// A create's tools ([{type: "function", name, description, parameters, strict}]) in chat's form
// for the template and the parser; `echoed` gets them as the Response shows them.
absl::StatusOr<Json> ResponseToolsOf(const Json& body, Json* echoed);

// A function_call output item of a reply.
Json FunctionCallItem(const std::string& name, const std::string& arguments);

}  // namespace stateful
}  // namespace shardlm
