// OpenAI's wire pieces both OpenAI front ends share (coordinator/openai/ and
// coordinator/stateful/): the JSON type, the error object and the mapping of
// the serving core's status codes onto it, and the depth-limited JSON parser.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace shardlm {
namespace openai {

using Json = nlohmann::ordered_json;

// An error as OpenAI's API reports it: {"error": {message, type, param, code}}.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
  Json Body() const;
};

// An error from the serving core (a canonical code) as an ApiError: INVALID_ARGUMENT 400,
// UNAUTHENTICATED 401, NOT_FOUND 404, RESOURCE_EXHAUSTED 429, UNAVAILABLE 503,
// DEADLINE_EXCEEDED 504, the rest 500. The engine's field names are given
// OpenAI's (max_new_tokens is max_tokens).
// A constraint's error (constraint.<kind>: ...) names `constraint_param`, the
// parameter that carried it (OpenAiRequest::constraint_param).
ApiError FromStatus(const absl::Status& status, const std::string& constraint_param = "");

inline constexpr int kMaxJsonDepth = 64;  // nesting of a request body

// Parses JSON from a client, nesting at most kMaxJsonDepth levels (a deeper
// value would cost stack in every later copy or dump of it). Throws
// Json::exception when it is not JSON, std::invalid_argument when too deep.
Json ParseJson(const std::string& text);

}  // namespace openai
}  // namespace shardlm
