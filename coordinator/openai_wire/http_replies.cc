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

absl::StatusCode StatusCodeForHttp(int http_status) {
  switch (http_status) {
    case 400:
    case 413:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 499:
      return absl::StatusCode::kCancelled;
    case 503:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace openai
}  // namespace shardlm
