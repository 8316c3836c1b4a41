// OpenAI's JSON bodies as HTTP replies, for both OpenAI front ends.
#pragma once

#include "coordinator/http/http_server.h"
#include "coordinator/openai_wire/api_error.h"

namespace shardlm {
namespace openai {

// The error's status and {"error": {...}} body.
HttpReply ErrorReply(const ApiError& e);
// 200 and the body (invalid UTF-8 replaced).
HttpReply JsonReply(const Json& body);

}  // namespace openai
}  // namespace shardlm
