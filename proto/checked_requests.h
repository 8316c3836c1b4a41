// Public requests are parsed with their strings checked first, so that a
// string field holding invalid UTF-8 gets INVALID_ARGUMENT naming the field
// ("chunks[1].text is not valid UTF-8") instead of protobuf's bare parse
// failure (INTERNAL with an empty message, and a log line per request).
//
// gRPC deserializes every request through grpc::SerializationTraits<T>;
// explicit specializations for the shardlm.v1 request types route them
// through DeserializeChecked. The generated inference.grpc.pb.h includes this
// header (protoc's additional_header_includes), so every handler sees them.
#pragma once

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>

#include "shardlm/v1/inference.pb.h"

namespace shardlm {

// Parses `buffer` into `msg` after checking every string field (nested
// messages included) for UTF-8. INVALID_ARGUMENT naming the field path or
// saying that the bytes are not the message at all.
grpc::Status DeserializeChecked(grpc::ByteBuffer* buffer, google::protobuf::Message* msg);

}  // namespace shardlm

#define SHARDLM_CHECKED_REQUEST(Type)                                                          \
  template <>                                                                                  \
  class grpc::SerializationTraits<Type, void> {                                                \
   public:                                                                                     \
    static grpc::Status Serialize(const grpc::protobuf::MessageLite& msg, grpc::ByteBuffer* bb, \
                                  bool* own_buffer) {                                          \
      return grpc::GenericSerialize<grpc::ProtoBufferWriter, Type>(msg, bb, own_buffer);        \
    }                                                                                          \
    static grpc::Status Deserialize(grpc::ByteBuffer* buffer, Type* msg) {                      \
      return ::shardlm::DeserializeChecked(buffer, msg);                                       \
    }                                                                                          \
  };

SHARDLM_CHECKED_REQUEST(::shardlm::v1::GenerateRequest)
SHARDLM_CHECKED_REQUEST(::shardlm::v1::PrefillRequest)
SHARDLM_CHECKED_REQUEST(::shardlm::v1::ScoreRequest)
SHARDLM_CHECKED_REQUEST(::shardlm::v1::ReleaseChunksRequest)
SHARDLM_CHECKED_REQUEST(::shardlm::v1::TokenizeRequest)
SHARDLM_CHECKED_REQUEST(::shardlm::v1::DetokenizeRequest)

#undef SHARDLM_CHECKED_REQUEST
