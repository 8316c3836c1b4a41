#include "coordinator/grpc/grpc_call_record.h"

#include <string>

#include "common/grpc_status.h"

namespace shardlm {
namespace {

std::string ClientRequestId(const grpc::ServerContextBase& ctx) {
  const auto& md = ctx.client_metadata();
  auto it = md.find("x-request-id");
  return it == md.end() ? "" : std::string(it->second.data(), it->second.size());
}

}  // namespace

GrpcCallRecord::GrpcCallRecord(grpc::ServerContextBase* ctx, const char* method, ServiceMetrics* metrics)
    : CallRecord(ClientRequestId(*ctx), method, metrics), ctx_(ctx) {
  ctx->AddInitialMetadata("x-request-id", id());
  SetAbandonedCheck([ctx] { return ctx->IsCancelled(); });
  SetDeadline(ctx->deadline());
}

grpc::Status GrpcCallRecord::FinishGrpc(const grpc::Status& status) {
  std::string field;
  grpc::Status out = PublicGrpcStatus(ToGrpcStatus(Finish(FromGrpcStatus(status))), &field);
  if (!field.empty()) ctx_->AddTrailingMetadata(kErrorFieldMetadata, field);
  return out;
}

}  // namespace shardlm
