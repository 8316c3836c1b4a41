// The one place where absl::Status and grpc::Status meet.
#pragma once

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace shardlm {

// A field error (common/status.h ErrorField) keeps its field in the status's
// details while it travels inside this process (the gRPC service to the
// OpenAI front end); GrpcErrorField reads it back. A call that leaves over
// gRPC sends it as trailing metadata instead (PublicGrpcStatus), never as
// details, which clients read as a google.rpc.Status.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);
std::string GrpcErrorField(const grpc::Status& status);

// The trailing metadata key that names the field a request error is about.
inline constexpr char kErrorFieldMetadata[] = "shardlm-error-field";
// `status` as a gRPC client may see it: the field moved from the details to
// `field` (empty when none).
grpc::Status PublicGrpcStatus(const grpc::Status& status, std::string* field);

}  // namespace shardlm
