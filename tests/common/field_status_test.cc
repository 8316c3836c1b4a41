// A request error's field travels beside its message (common/status.h), through the
// absl -> gRPC conversion inside the process, and leaves a gRPC call as metadata, never
// as the status's details (common/grpc_status.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/grpc_status.h"
#include "common/status.h"

namespace shardlm {
namespace {

TEST(FieldStatusTest, TheFieldTravelsBesideTheMessage) {
  absl::Status st = InvalidField("temperature", "must be in [0, 100], got 101");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "temperature must be in [0, 100], got 101");
  EXPECT_EQ(ErrorField(st), "temperature");
  EXPECT_EQ(ErrorField(absl::InvalidArgumentError("temperature is not a field here")), "")
      << "the text is never read for a field";
  EXPECT_EQ(ErrorField(WithField(absl::NotFoundError("x"), "prefix_handle")), "prefix_handle");
  EXPECT_TRUE(WithField(absl::OkStatus(), "n").ok());
}

TEST(FieldStatusTest, GrpcKeepsItInsideAndSendsItAsMetadata) {
  const grpc::Status inside = ToGrpcStatus(InvalidField("constraint.regex", "does not compile"));
  EXPECT_EQ(inside.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(inside.error_message(), "constraint.regex does not compile");
  EXPECT_EQ(GrpcErrorField(inside), "constraint.regex");
  EXPECT_EQ(ErrorField(FromGrpcStatus(inside)), "constraint.regex");

  std::string field;
  const grpc::Status outside = PublicGrpcStatus(inside, &field);
  EXPECT_EQ(field, "constraint.regex");
  EXPECT_EQ(outside.error_message(), inside.error_message());
  EXPECT_EQ(outside.error_details(), "") << "details are a google.rpc.Status to clients";

  const grpc::Status plain = ToGrpcStatus(absl::UnavailableError("no group"));
  EXPECT_EQ(GrpcErrorField(plain), "");
  EXPECT_EQ(PublicGrpcStatus(plain, &field).error_message(), "no group");
  EXPECT_EQ(field, "");
}

}  // namespace
}  // namespace shardlm
