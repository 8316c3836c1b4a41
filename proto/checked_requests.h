// Public requests are parsed with their strings checked first, so that a
// string field holding invalid UTF-8 gets INVALID_ARGUMENT naming the field
// ("chunks[1].text is not valid UTF-8") instead of protobuf's bare parse
// failure (INTERNAL with an empty message, and a log line per request).
//
// gRPC deserializes every request through grpc::SerializationTraits<T>;
// the explicit specializations below route them through DeserializeChecked.
// The generated .grpc.pb.h files include this header (protoc's
// additional_header_includes), so every handler sees them.
#pragma once

#include <google/protobuf/message.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>

#include "shardlm/v1/inference.pb.h"
#include "vllm/grpc/engine/vllm_engine.pb.h"

namespace shardlm {

// Parses `buffer` into `msg` after checking every string field (nested
// messages included) for UTF-8. INVALID_ARGUMENT naming the field path or
// saying that the bytes are not the message at all.
grpc::Status DeserializeChecked(grpc::ByteBuffer* buffer, google::protobuf::Message* msg);

// The request types of callback handlers (Generate, Prefill, Score; vLLM's
// Generate). gRPC
// 1.51's callback API answers a request that fails to deserialize with
// UNIMPLEMENTED and no message, so their requests parse through
// DeserializeDeferred: a failure leaves the message empty, returns OK and is
// kept for the handler, which takes it with TakeParseError(request) before
// anything else and ends the call with it.
grpc::Status DeserializeDeferred(grpc::ByteBuffer* buffer, google::protobuf::Message* msg);
// The failure DeserializeDeferred kept for `msg` (OK if none); forgets it.
grpc::Status TakeParseError(const google::protobuf::Message* msg);

}  // namespace shardlm

// Unary handlers deserialize through SerializationTraits<MessageLite> (the
// generated code passes MessageLite as the base type), streaming ones through
// the request's own type. Every generated .grpc.pb.h of this project includes
// this header, so both are seen wherever gRPC instantiates them.
template <>
class grpc::SerializationTraits<grpc::protobuf::MessageLite, void> {
 public:
  static grpc::Status Serialize(const grpc::protobuf::MessageLite& msg, grpc::ByteBuffer* bb,
                                bool* own_buffer) {
    return grpc::GenericSerialize<grpc::ProtoBufferWriter, grpc::protobuf::MessageLite>(msg, bb, own_buffer);
  }
  static grpc::Status Deserialize(grpc::ByteBuffer* buffer, grpc::protobuf::MessageLite* msg) {
    if (auto* full = dynamic_cast<google::protobuf::Message*>(msg)) {
      return ::shardlm::DeserializeChecked(buffer, full);
    }
    return grpc::GenericDeserialize<grpc::ProtoBufferReader, grpc::protobuf::MessageLite>(buffer, msg);
  }
};

// The callback handlers' request types, parsed with DeserializeDeferred.
#define SHARDLM_DEFERRED_PARSE(Type)                                                            \
  template <>                                                                                   \
  class grpc::SerializationTraits<Type, void> {                                                 \
   public:                                                                                      \
    static grpc::Status Serialize(const grpc::protobuf::MessageLite& msg, grpc::ByteBuffer* bb, \
                                  bool* own_buffer) {                                           \
      return grpc::GenericSerialize<grpc::ProtoBufferWriter, Type>(msg, bb, own_buffer);        \
    }                                                                                           \
    static grpc::Status Deserialize(grpc::ByteBuffer* buffer, Type* msg) {                      \
      return ::shardlm::DeserializeDeferred(buffer, msg);                                       \
    }                                                                                           \
  };
SHARDLM_DEFERRED_PARSE(::shardlm::v1::GenerateRequest)
SHARDLM_DEFERRED_PARSE(::shardlm::v1::PrefillRequest)
SHARDLM_DEFERRED_PARSE(::shardlm::v1::ScoreRequest)
SHARDLM_DEFERRED_PARSE(::vllm::grpc::engine::GenerateRequest)
#undef SHARDLM_DEFERRED_PARSE
