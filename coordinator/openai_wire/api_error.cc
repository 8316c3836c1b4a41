#include "coordinator/openai_wire/api_error.h"

#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/status.h"

namespace shardlm {
namespace openai {

Json ApiError::Body() const {
  Json e = Json::object();
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? Json() : Json(param);
  e["code"] = code.empty() ? Json() : Json(code);
  Json body = Json::object();
  body["error"] = std::move(e);
  return body;
}

namespace {

// The OpenAI parameter a request field of the gRPC API (common/status.h
// ErrorField) stands for: the same name, but for the token budget, the
// prompt's parts and the constraint (which came as the parameter parsed).
std::string OpenAiParam(const std::string& field, const std::string& constraint_param) {
  if (field == "max_new_tokens") return "max_tokens";
  if (field.rfind("prompt", 0) == 0) return "prompt";
  if (field.rfind("constraint.", 0) == 0)
    return constraint_param.empty() ? "response_format" : constraint_param;
  return field;
}

}  // namespace

ApiError FromStatus(const absl::Status& status, const std::string& constraint_param) {
  ApiError e;
  e.message = absl::StrReplaceAll(status.message(), {{"max_new_tokens", "max_tokens"}});
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      e.http_status = 400;
      e.param = OpenAiParam(ErrorField(status), constraint_param);
      break;
    case absl::StatusCode::kUnauthenticated:
      e = ApiError{401, e.message, "authentication_error", "", "invalid_api_key"};
      break;
    case absl::StatusCode::kPermissionDenied:
      e = ApiError{403, e.message, "permission_error", "", ""};
      break;
    case absl::StatusCode::kNotFound:
      e = ApiError{404, e.message, "not_found_error", "", ""};
      break;
    case absl::StatusCode::kResourceExhausted:
      e = ApiError{429, e.message, "rate_limit_error", "", ""};
      break;
    case absl::StatusCode::kUnavailable:
      e = ApiError{503, e.message, "service_unavailable_error", "", ""};
      break;
    case absl::StatusCode::kDeadlineExceeded:
      e = ApiError{504, e.message, "timeout_error", "", ""};
      break;
    case absl::StatusCode::kCancelled:
      e = ApiError{499, e.message, "cancelled", "", ""};
      break;
    default:
      e = ApiError{500, e.message, "server_error", "", ""};
      break;
  }
  return e;
}

Json ParseJson(const std::string& text) {
  return Json::parse(text, [](int depth, Json::parse_event_t, Json&) {
    if (depth > kMaxJsonDepth) {
      throw std::invalid_argument(absl::StrCat("nesting deeper than ", kMaxJsonDepth, " levels"));
    }
    return true;
  });
}

}  // namespace openai
}  // namespace shardlm
