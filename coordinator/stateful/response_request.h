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
  std::vector<Json> input;   // items as stored (response_items.h): messages, function calls, outputs
  std::optional<std::string> previous_response_id;
  std::optional<std::string> conversation_id;  // its items come first, and it takes this turn's
  bool store = true;
  bool stream = false;
  bool background = false;          // generate after the create answers (store required; not streamed)
  bool truncation_auto = false;     // "auto": drop the oldest turns to fit; "disabled": a 400
  ReplySettings settings;           // temperature, top_p, max_output_tokens, text.format
  Json chat_tools = Json::array();  // the function tools, in chat's form
  Json tool_choice = "auto";        // as given (checked)
  Json config;                      // what the Response object echoes (model, instructions, text, ...)
};

// Errors name the field and the limit; tools other than functions, include,
// reasoning and prompt are refused by name.
absl::StatusOr<ResponseRequest> ParseResponseRequest(const Json& body,
                                                     const std::vector<std::string>& model_names);

}  // namespace stateful
}  // namespace shardlm
