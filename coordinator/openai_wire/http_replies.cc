#include "coordinator/openai_wire/http_replies.h"

namespace shardlm {
namespace openai {

HttpReply ErrorReply(const ApiError& e) {
  HttpReply r;
  r.status = e.http_status;
  r.body = e.Body().dump(-1, ' ', false, Json::error_handler_t::replace);
  return r;
}

HttpReply JsonReply(const Json& body) {
  HttpReply r;
  r.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  return r;
}

}  // namespace openai
}  // namespace shardlm
