#include "coordinator/call_record.h"

#include <cstdio>

#include "absl/strings/escaping.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/random_token.h"

namespace shardlm {
namespace {

bool SaneId(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

bool CallRecord::Abandoned() const {
  if (abandoned_ && abandoned_()) return true;
  if (ctx_ == nullptr) return false;
  return ctx_->IsCancelled() || std::chrono::system_clock::now() > ctx_->deadline();
}

CallRecord::CallRecord(grpc::ServerContextBase* ctx, const char* method, ServiceMetrics* metrics)
    : method_(method), metrics_(metrics), ctx_(ctx), start_(std::chrono::steady_clock::now()) {
  const auto& md = ctx->client_metadata();
  auto it = md.find("x-request-id");
  if (it != md.end()) id_.assign(it->second.data(), it->second.size());
  if (!SaneId(id_)) id_ = RandomToken(8);
  ctx->AddInitialMetadata("x-request-id", id_);
  if (metrics_) metrics_->CallStarted();
}

CallRecord::CallRecord(const std::string& client_id, const char* method, ServiceMetrics* metrics)
    : method_(method), metrics_(metrics), id_(client_id), start_(std::chrono::steady_clock::now()) {
  if (!SaneId(id_)) id_ = RandomToken(8);
  if (metrics_) metrics_->CallStarted();
}

CallRecord::~CallRecord() {
  if (metrics_) metrics_->CallEnded();
}

grpc::Status CallRecord::Finish(grpc::Status status) {
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start_;
  // The log and the metrics say what the client saw: an answer finished after
  // its client left or its deadline passed never reached it.
  if (status.ok() && Abandoned()) {
    const bool late = ctx_ != nullptr && std::chrono::system_clock::now() > ctx_->deadline();
    status = grpc::Status(late ? grpc::StatusCode::DEADLINE_EXCEEDED : grpc::StatusCode::CANCELLED,
                          late ? "finished after the call's deadline" : "finished after the client left");
  }
  if (ctx_ != nullptr) {
    // The field an INVALID_ARGUMENT is about goes to gRPC clients as metadata.
    std::string field;
    status = PublicGrpcStatus(status, &field);
    if (!field.empty()) ctx_->AddTrailingMetadata(kErrorFieldMetadata, field);
  }
  const char* code = CodeName(status.error_code());
  if (metrics_) metrics_->RequestDone(method_, code, took.count());
  char latency[32];
  std::snprintf(latency, sizeof(latency), "%.1f", took.count() * 1000);
  LOG(INFO) << "request " << id_ << " " << method_ << " status=" << code << " tokens_in=" << tokens_in_
            << " cached=" << cached_ << " tokens_out=" << tokens_out_ << " latency_ms=" << latency
            << (status.ok() ? ""
                            : " error=\"" + absl::CHexEscape(status.error_message().substr(0, 200)) + "\"");
  return status;
}

const char* CallRecord::CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

}  // namespace shardlm
