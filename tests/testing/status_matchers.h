// gMock matchers for absl::Status / StatusOr:
//   EXPECT_THAT(st, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("top_p")));
#pragma once

#include <gmock/gmock.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shardlm::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

MATCHER_P2(StatusIs, code, message_matcher, "") {
  const absl::Status& st = GetStatus(arg);
  *result_listener << "status is " << st;
  return st.code() == code &&
         ::testing::ExplainMatchResult(message_matcher, std::string(st.message()), result_listener);
}

MATCHER(IsOk, "") {
  const absl::Status& st = GetStatus(arg);
  *result_listener << "status is " << st;
  return st.ok();
}

}  // namespace shardlm::testing
