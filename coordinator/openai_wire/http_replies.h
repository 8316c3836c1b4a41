// JSON bodies as HTTP replies, for the HTTP front ends (OpenAI's two, and Ollama's, which
// shares JsonReply and StatusCodeForHttp but writes its own errors).
#pragma once

#include "coordinator/http/http_server.h"
#include "coordinator/openai_wire/api_error.h"

namespace shardlm {
namespace openai {

// The error's status and {"error": {...}} body.
HttpReply ErrorReply(const ApiError& e);
// 200 and the body (invalid UTF-8 replaced).
HttpReply JsonReply(const Json& body);
// The status a call answered with an HTTP error is recorded under (its log line and
// counters): 400 and 413 INVALID_ARGUMENT, 401, 403, 404, 499 CANCELLED, 503; the rest INTERNAL.
absl::StatusCode StatusCodeForHttp(int http_status);

}  // namespace openai
}  // namespace shardlm
