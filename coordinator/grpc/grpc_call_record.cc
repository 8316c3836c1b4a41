#include "coordinator/grpc/grpc_call_record.h"

#include <chrono>
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

GrpcCallRecord::GrpcCallRecord(grpc::ServerContextBase* ctx, const char* method, ServiceMetrics* metrics,
                               const std::string& client_id)
    : CallRecord(client_id.empty() ? ClientRequestId(*ctx) : client_id, method, metrics), ctx_(ctx) {
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

absl::Status CallGone(const grpc::ServerContextBase& ctx) {
  if (!ctx.IsCancelled()) return absl::OkStatus();
  // The client's deadline runs from when it sent the call, this side's from
  // when the headers were read: the client's expiry (a RST_STREAM, which
  // reads as a cancellation) can arrive before this side's own. Within the
  // margin it is the deadline (load_test.py's deadlines case saw a 0.3 s call
  // logged CANCELLED once in ten runs without it).
  constexpr auto kDeadlineMargin = std::chrono::milliseconds(200);
  if (ctx.deadline() <= std::chrono::system_clock::now() + kDeadlineMargin) {
    return absl::DeadlineExceededError(
        "the call's deadline passed; its work was stopped and its blocks freed");
  }
  return absl::CancelledError("the client cancelled; its work was stopped and its blocks freed");
}

grpc::Status AdmitGrpc(const ServingCore& core, const grpc::ServerContextBase& ctx, std::string* owner) {
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return ToGrpcStatus(core.AdmitKey(nullptr, "metadata", owner));
  const std::string value(it->second.data(), it->second.size());
  return ToGrpcStatus(core.AdmitKey(&value, "metadata", owner));
}

}  // namespace shardlm
