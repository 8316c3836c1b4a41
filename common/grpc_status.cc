#include "common/grpc_status.h"

#include <string>

#include "common/status.h"

namespace shardlm {

namespace {
constexpr char kFieldDetails[] = "shardlm-field:";
}  // namespace

// Both use the canonical codes with the same numbers.
grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const std::string field = ErrorField(status);
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()),
                      field.empty() ? std::string() : kFieldDetails + field);
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return WithField(absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message()),
                   GrpcErrorField(status));
}

std::string GrpcErrorField(const grpc::Status& status) {
  const std::string& details = status.error_details();
  if (details.rfind(kFieldDetails, 0) != 0) return "";
  return details.substr(sizeof(kFieldDetails) - 1);
}

grpc::Status PublicGrpcStatus(const grpc::Status& status, std::string* field) {
  *field = GrpcErrorField(status);
  if (field->empty()) return status;
  return grpc::Status(status.error_code(), status.error_message());
}

}  // namespace shardlm
