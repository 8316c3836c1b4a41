#include "coordinator/serving/call_record.h"

#include <cstdio>

#include "absl/strings/escaping.h"
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

CallRecord::CallRecord(const std::string& client_id, const char* method, ServiceMetrics* metrics)
    : method_(method), metrics_(metrics), id_(client_id), start_(std::chrono::steady_clock::now()) {
  if (!SaneId(id_)) id_ = RandomToken(8);
  if (metrics_) metrics_->CallStarted();
}

CallRecord::~CallRecord() {
  if (metrics_) metrics_->CallEnded();
}

void CallRecord::SetDeadline(std::chrono::system_clock::time_point deadline) {
  deadline_ = deadline;
  const auto left = deadline - std::chrono::system_clock::now();  // no overflow: now > epoch
  if (left < std::chrono::hours(24)) {
    engine_deadline_ = std::chrono::steady_clock::now() +
                       std::chrono::duration_cast<std::chrono::steady_clock::duration>(left);
  }
}

bool CallRecord::PastDeadline() const {
  return deadline_.has_value() && std::chrono::system_clock::now() > *deadline_;
}

bool CallRecord::Abandoned() const { return (abandoned_ && abandoned_()) || PastDeadline(); }

absl::Status CallRecord::Finish(absl::Status status) {
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start_;
  // The log and the metrics say what the client saw: an answer finished after
  // its client left or its deadline passed never reached it.
  if (status.ok() && Abandoned()) {
    status = PastDeadline() ? absl::DeadlineExceededError("finished after the call's deadline")
                            : absl::CancelledError("finished after the client left");
  }
  // absl's code names are gRPC's ("OK", "INVALID_ARGUMENT", ...); a code
  // outside the canonical ones is UNKNOWN, as gRPC names it.
  std::string code = absl::StatusCodeToString(status.code());
  if (code.empty()) code = "UNKNOWN";
  if (metrics_) metrics_->RequestDone(method_, code.c_str(), took.count());
  char latency[32];
  std::snprintf(latency, sizeof(latency), "%.1f", took.count() * 1000);
  LOG(INFO) << "request " << id_ << " " << method_ << " status=" << code << " tokens_in=" << tokens_in_
            << " cached=" << cached_ << " tokens_out=" << tokens_out_ << " latency_ms=" << latency
            << (status.ok()
                    ? ""
                    : " error=\"" + absl::CHexEscape(std::string(status.message()).substr(0, 200)) + "\"");
  return status;
}

}  // namespace shardlm
