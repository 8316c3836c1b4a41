// StepExecutor over the worker processes: encodes each step once, sends it to
// every rank in parallel (async gRPC), and returns rank 0's rows.
//
// The first failing rank fails the step at once (the other calls are
// cancelled) with UNAVAILABLE naming the rank; a stopped rank is caught by its
// peers' collective timeout. After a failure the group is in an unknown state,
// so every later step fails fast with the same error; the coordinator stays up.
//
//   SHARDLM_ASSIGN_OR_RETURN(auto exec, RemoteExecutor::Connect(addresses, fingerprint, opts));
//   Engine engine(exec.get(), cfg, exec->num_blocks(), exec->block_size(), {});
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/step.h"
#include "shardlm/worker/v1/worker.grpc.pb.h"

namespace shardlm {

struct RemoteExecutorOptions {
  std::chrono::milliseconds handshake_timeout{120000};  // workers loading their shards
  std::chrono::milliseconds step_timeout{60000};        // one step, e.g. a long prefill
};

// Where one step's time went, for the benchmark.
struct StepTiming {
  int64_t coordinator_us = 0;  // send to all, wait for all, decode (wall)
  int64_t worker_us = 0;       // rank 0's Step handler
  int64_t collective_us = 0;   // rank 0's time inside collectives
};

class RemoteExecutor final : public StepExecutor {
 public:
  static absl::StatusOr<std::unique_ptr<RemoteExecutor>> Connect(const std::vector<std::string>& addresses,
                                                                 const std::string& fingerprint,
                                                                 RemoteExecutorOptions options);

  absl::StatusOr<std::vector<RowResult>> Execute(const StepInput& step) override;

  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  int world_size() const { return static_cast<int>(stubs_.size()); }
  // Per-rank handshake answers (weights, KV pool, resident memory).
  const std::vector<::shardlm::worker::v1::HandshakeResponse>& ranks() const { return ranks_; }
  StepTiming last_timing() const { return timing_; }
  // False once a step has failed (the group is broken). Thread-safe.
  bool healthy() const { return healthy_.load(); }

 private:
  std::vector<std::unique_ptr<::shardlm::worker::v1::Worker::Stub>> stubs_;
  std::vector<::shardlm::worker::v1::HandshakeResponse> ranks_;
  RemoteExecutorOptions options_;
  int32_t num_blocks_ = 0;
  int32_t block_size_ = 16;
  uint64_t next_step_ = 1;
  absl::Status broken_;
  std::atomic<bool> healthy_{true};
  StepTiming timing_;
};

}  // namespace shardlm
