// One public call's accounting, whatever front end it came through: its
// request id, one log line when it ends, and the request counters.
//
// The id is the client's request id (gRPC metadata or the HTTP header
// `x-request-id`) when it sends a sane one (1-64 characters of
// [A-Za-z0-9._:-]), else 16 random hex digits. The front end echoes it to the
// client; it goes into the engine's requests (and from there into the
// workers' log lines), and into the line logged at the end:
//
//   request 3f9c0a1b2c3d4e5f Generate status=OK tokens_in=12 cached=0 tokens_out=16 latency_ms=41.2
//
//   CallRecord call(client_id, "CreateCompletion", core.metrics());
//   call.SetAbandonedCheck([&] { return exchange.ClientGone(); });
//   ...
//   absl::Status st = call.Finish(Run(...));
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "coordinator/engine/service_metrics.h"

namespace shardlm {

class CallRecord {
 public:
  // `client_id` is the client's request id (may be empty: one is made up);
  // `metrics` may be null (no counters; the log line is still written).
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
  // long text). The front end says how to tell.
  bool Abandoned() const;
  void SetAbandonedCheck(std::function<bool()> check) { abandoned_ = std::move(check); }
  // The client's deadline, where its protocol has one.
  void SetDeadline(std::chrono::system_clock::time_point deadline);
  // That deadline on the engine's clock (EngineRequest::deadline); unset
  // without one, or with one over a day away (gRPC's "none" is the far future).
  std::chrono::steady_clock::time_point engine_deadline() const { return engine_deadline_; }

  // Logs the line, counts the call, and returns `status`, except that an
  // answer finished after its client left (CANCELLED) or its deadline passed
  // (DEADLINE_EXCEEDED) is logged and returned as what the client saw.
  absl::Status Finish(absl::Status status);

 private:
  bool PastDeadline() const;

  const char* method_;
  ServiceMetrics* metrics_;
  std::function<bool()> abandoned_;
  std::optional<std::chrono::system_clock::time_point> deadline_;
  std::chrono::steady_clock::time_point engine_deadline_{};
  std::string id_;
  std::chrono::steady_clock::time_point start_;
  // Set by concurrent prompts of one HTTP call too: atomics.
  std::atomic<int64_t> tokens_in_{0}, cached_{0}, tokens_out_{0};
};

}  // namespace shardlm
