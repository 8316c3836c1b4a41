// StepExecutor over one formation (epoch) of the worker processes: encodes
// each step once, sends it to every rank in parallel (async gRPC), and returns
// rank 0's rows.
//
// The first failing rank fails the step at once (the other calls are
// cancelled). A step's deadline grows with its tokens, so a long prefill is
// not a failure. Whether a failure broke the group is for the caller to judge
// with Probe(): WorkerGroup does, and re-forms the group when it did.
//
//   SHARDLM_ASSIGN_OR_RETURN(auto exec, RemoteExecutor::Connect(group, fingerprint, opts));
//   Engine engine(exec.get(), cfg, exec->num_blocks(), exec->block_size(), {});
#pragma once

#include <grpcpp/security/credentials.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/engine/service_metrics.h"
#include "shardlm/worker/v1/worker.grpc.pb.h"
#include "step/step.h"

namespace shardlm {

struct RemoteExecutorOptions {
  std::chrono::milliseconds handshake_timeout{120000};  // workers loading their shards
  // A step's deadline: step_timeout plus, per token in the step, the larger
  // of step_timeout_per_token and 8x the recent time per token.
  std::chrono::milliseconds step_timeout{60000};
  std::chrono::milliseconds step_timeout_per_token{20};
  std::string internal_token;                             // carried by every call (empty: none)
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // null: plaintext
  ServiceMetrics* metrics = nullptr;                      // per-rank step times go here when set
};

// One rank's answer to a health probe.
struct RankProbe {
  bool reachable = true;   // answered at all
  bool timed_out = false;  // did not answer in time (stopped or hung), as opposed to refused
  bool ready = true;       // answered, and its communicator is sound
  std::string detail;      // why not, naming the rank and address
};

// Where one step's time went, for the benchmark.
struct StepTiming {
  int64_t coordinator_us = 0;  // send to all, wait for all, decode (wall)
  int64_t worker_us = 0;       // rank 0's Step handler
  int64_t collective_us = 0;   // rank 0's time inside collectives
};

class RemoteExecutor final : public StepExecutor {
 public:
  // Handshakes every rank of the group formed in `epoch` at `addresses` (by rank).
  static absl::StatusOr<std::unique_ptr<RemoteExecutor>> Connect(const std::vector<std::string>& addresses,
                                                                 uint64_t epoch,
                                                                 const std::string& fingerprint,
                                                                 RemoteExecutorOptions options);

  absl::StatusOr<std::vector<RowResult>> Execute(const StepInput& step) override;
  // Sends the step to every rank and returns; Wait on the result collects the
  // rows. Call from one thread; steps run on the ranks in the order started.
  bool Overlaps() const override { return true; }
  std::unique_ptr<PendingStep> StartStep(const StepInput& step) override;
  // Asks every rank's Health in parallel, each within `timeout`.
  std::vector<RankProbe> Probe(std::chrono::milliseconds timeout);

  uint64_t epoch() const { return epoch_; }
  const std::vector<std::string>& addresses() const { return addresses_; }

  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  int world_size() const { return static_cast<int>(stubs_.size()); }
  // Per-rank handshake answers (weights, KV pool, resident memory).
  const std::vector<::shardlm::worker::v1::HandshakeResponse>& ranks() const { return ranks_; }
  StepTiming last_timing() const { return timing_; }

 private:
  class RemoteStep;
  std::chrono::milliseconds StepDeadline(size_t tokens) const;

  uint64_t epoch_ = 0;
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<::shardlm::worker::v1::Worker::Stub>> stubs_;
  std::vector<::shardlm::worker::v1::HandshakeResponse> ranks_;
  RemoteExecutorOptions options_;
  int32_t num_blocks_ = 0;
  int32_t block_size_ = 16;
  uint64_t next_step_ = 1;
  uint64_t last_sent_ = 0;                                 // the step sent last (0: none yet)
  std::chrono::system_clock::time_point last_deadline_{};  // that step's deadline
  double ms_per_token_ = 0;                                // recent steps, exponentially weighted
  StepTiming timing_;
};

}  // namespace shardlm
