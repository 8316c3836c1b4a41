// A Responses API create body (POST /v1/responses), checked and normalized
// (docs/stateful_apis.md): its input as stored message items, its sampling as
// ReplySettings, and the fields a Response object echoes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/stateful/reply_generation.h"

namespace shardlm {
namespace stateful {

struct ResponseRequest {
  std::string model;
  std::string instructions;  // empty: none
  std::vector<Json> input;   // message items: {id, type: "message", role, status, content: [...]}
  std::optional<std::string> previous_response_id;
  std::optional<std::string> conversation_id;  // its items come first, and it takes this turn's
  bool store = true;
  bool stream = false;
  bool background = false;       // generate after the create answers (store required; not streamed)
  bool truncation_auto = false;  // "auto": drop the oldest turns to fit; "disabled": a 400
  ReplySettings settings;        // temperature, top_p, max_output_tokens, text.format
  Json config;                   // what the Response object echoes (model, instructions, text, ...)
};

// Errors name the field and the limit; tools, include,
// reasoning and prompt are refused by name (not supported yet).
absl::StatusOr<ResponseRequest> ParseResponseRequest(const Json& body,
                                                     const std::vector<std::string>& model_names);

// One input item as stored: a message with its text parts (input_text, or output_text for the
// assistant) and a new id. `param` names it in errors ("input[2]", "items[0]").
absl::StatusOr<Json> MessageItem(const Json& item, const std::string& param);

// A stored item as a chat turn: {role, content: its text}; "developer" is the system role.
Json TurnOf(const Json& item);

}  // namespace stateful
}  // namespace shardlm
