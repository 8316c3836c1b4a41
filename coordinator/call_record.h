// One public call's accounting: its request id, one log line when it ends,
// and the request counters.
//
// The id is the client's `x-request-id` metadata when it sends a sane one
// (1-64 characters of [A-Za-z0-9._:-]), else 16 random hex digits. It goes
// back to the client as initial metadata `x-request-id`, into the engine's
// requests (and from there into the workers' log lines), and into the line
// logged at the end:
//
//   request 3f9c0a1b2c3d4e5f Generate status=OK tokens_in=12 cached=0 tokens_out=16 latency_ms=41.2
//
//   grpc::Status InferenceService::Score(ctx, req, resp) {
//     CallRecord call(ctx, "Score", metrics_);
//     return call.Finish(ScoreImpl(ctx, req, resp, call));
//   }
#pragma once

#include <grpcpp/server_context.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "coordinator/service_metrics.h"

namespace shardlm {

class CallRecord {
 public:
  // `metrics` may be null (no counters; the log line is still written).
  CallRecord(grpc::ServerContextBase* ctx, const char* method, ServiceMetrics* metrics);
  // A call from another front end (the OpenAI HTTP API): `client_id` is the
  // client's x-request-id header (may be empty); the caller echoes id().
  CallRecord(const std::string& client_id, const char* method, ServiceMetrics* metrics);
  ~CallRecord();
  CallRecord(const CallRecord&) = delete;
  CallRecord& operator=(const CallRecord&) = delete;

  const std::string& id() const { return id_; }
  std::chrono::steady_clock::time_point start() const { return start_; }
  void SetTokens(int64_t in, int64_t cached, int64_t out) {
    tokens_in_ = in;
    cached_ = cached;
    tokens_out_ = out;
  }
  // True once the call's client has gone or its deadline has passed, so that
  // work done for it alone can stop (the tokenizer asks between pieces of a
  // long text). gRPC calls ask their context; other front ends set a check.
  bool Abandoned() const;
  void SetAbandonedCheck(std::function<bool()> check) { abandoned_ = std::move(check); }

  // Logs the line, counts the call, and returns `status` unchanged.
  grpc::Status Finish(grpc::Status status);

  // The gRPC name of a status code ("OK", "INVALID_ARGUMENT", ...).
  static const char* CodeName(grpc::StatusCode code);

 private:
  const char* method_;
  ServiceMetrics* metrics_;
  grpc::ServerContextBase* ctx_ = nullptr;  // null for calls from other front ends
  std::function<bool()> abandoned_;
  std::string id_;
  std::chrono::steady_clock::time_point start_;
  // Set by concurrent prompts of one HTTP call too: atomics.
  std::atomic<int64_t> tokens_in_{0}, cached_{0}, tokens_out_{0};
};

}  // namespace shardlm
