// Public requests parse with their strings checked (proto/checked_requests.h):
// invalid UTF-8 names the field, bytes that are no message say so, and the
// callback methods' deferred failures reach their handler once and only for
// the message they belong to.
#include "proto/checked_requests.h"

#include <gtest/gtest.h>

#include <string>

namespace shardlm {
namespace {

grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

TEST(CheckedRequestsTest, InvalidUtf8NamesTheFieldPath) {
  v1::PrefillRequest req;
  req.add_chunks()->set_text("fine");
  req.add_chunks()->set_text("also fine");
  std::string bytes = req.SerializeAsString();
  bytes[bytes.rfind("also")] = '\xff';
  grpc::ByteBuffer buf = Buffer(bytes);
  v1::PrefillRequest out;
  grpc::Status st = DeserializeChecked(&buf, &out);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("chunks[1].text is not valid UTF-8"), std::string::npos)
      << st.error_message();
}

TEST(CheckedRequestsTest, DeferredFailureIsTakenOnceAndCleared) {
  v1::ScoreRequest msg;
  grpc::ByteBuffer bad = Buffer(std::string("\x0a\x03\x0a\x01\xff", 5));
  EXPECT_TRUE(DeserializeDeferred(&bad, &msg).ok());  // what gRPC sees
  EXPECT_FALSE(msg.has_prompt());                     // left empty
  grpc::Status st = TakeParseError(&msg);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("prompt.text"), std::string::npos) << st.error_message();
  EXPECT_TRUE(TakeParseError(&msg).ok());  // taken once

  // A failure whose handler never ran does not reach the next good message
  // parsed at the same address.
  grpc::ByteBuffer bad2 = Buffer(std::string("\x0a\x05\xff", 3));
  EXPECT_TRUE(DeserializeDeferred(&bad2, &msg).ok());
  v1::ScoreRequest good;
  good.mutable_prompt()->set_text("hello");
  grpc::ByteBuffer ok = Buffer(good.SerializeAsString());
  EXPECT_TRUE(DeserializeDeferred(&ok, &msg).ok());
  EXPECT_EQ(msg.prompt().text(), "hello");
  EXPECT_TRUE(TakeParseError(&msg).ok());
}

}  // namespace
}  // namespace shardlm
