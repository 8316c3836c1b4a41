// Status helpers shared by every component.
//
// Recoverable failures travel as absl::Status / absl::StatusOr<T> (abseil
// Tip #76); CHECK is for programmer invariants only.
//
//   absl::StatusOr<Config> LoadConfig(const std::string& dir) {
//     SHARDLM_ASSIGN_OR_RETURN(std::string text, ReadFile(dir + "/config.json"));
//     SHARDLM_RETURN_IF_ERROR(Validate(text));
//     ...
//   }
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define SHARDLM_CONCAT_INNER(a, b) a##b
#define SHARDLM_CONCAT(a, b) SHARDLM_CONCAT_INNER(a, b)

#define SHARDLM_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::absl::Status shardlm_status_ = (expr);           \
    if (!shardlm_status_.ok()) return shardlm_status_; \
  } while (0)

#define SHARDLM_ASSIGN_OR_RETURN(lhs, expr) \
  SHARDLM_ASSIGN_OR_RETURN_IMPL(SHARDLM_CONCAT(shardlm_statusor_, __LINE__), lhs, expr)

#define SHARDLM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();      \
  lhs = std::move(tmp).value()

namespace shardlm {

// An INVALID_ARGUMENT about one request field. The field travels beside the
// message as the status's payload, so that a front end names the parameter
// (OpenAI's `param`) without reading the text; the message still says it
// first for people: InvalidField("temperature", "must be in [0, 100], got 101")
// reads "temperature must be in [0, 100], got 101".
absl::Status InvalidField(const std::string& field, const std::string& message);
// The same field on another status (any code); `status` when it is OK.
absl::Status WithField(absl::Status status, const std::string& field);
// The field an error is about; empty when it names none.
std::string ErrorField(const absl::Status& status);

// Reads a whole file; NotFound / Internal name the path.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Writes a whole file (truncating); the error names the path.
absl::Status WriteStringToFile(const std::string& path, const std::string& data);

// Runs `fn`, turning any C++ exception (libtorch throws c10::Error) into an
// Internal status that starts with `context`. Torch calls in request paths go
// through this so that no exception escapes to a caller.
template <typename Fn>
absl::Status CatchTorchErrors(const std::string& context, Fn&& fn);

}  // namespace shardlm

#include "common/status_inl.h"
