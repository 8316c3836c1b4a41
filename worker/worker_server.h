// The `shardlm worker` process: serves shardlm.worker.v1.Worker for one rank.
//
// Start-up: serve the Worker service on --listen, register with the
// coordinator for this worker's own rank (which answers once every rank has
// joined, with the group's epoch and settings), bootstrap the collectives
// through the coordinator's store, load this rank's shard, allocate the KV
// pool, then answer Handshake. Steps run one at a time.
//
// Recovery: the worker sends a heartbeat every 500 ms. When the coordinator
// has started a new epoch (a peer died or stopped), the worker drops its
// broken communicator, registers again for the same rank, bootstraps fresh
// collectives and clears its KV pool; the weights stay loaded. The process
// exits when asked (SIGTERM, SIGINT) or when the coordinator has been
// unreachable for a few seconds, so a worker never outlives its group.
//
//   WorkerProcessOptions o{.coordinator = "10.0.0.1:50052", .model_dir = "/models/llama"};
//   return RunWorkerProcess(o, &stop_flag);
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace grpc {
class ChannelCredentials;
class ServerCredentials;
}  // namespace grpc

namespace shardlm {

struct WorkerProcessOptions {
  std::string coordinator;  // host:port of the coordinator's worker endpoint
  std::string model_dir;
  std::string listen = "127.0.0.1:0";        // port 0: any free port
  std::string advertise_host = "127.0.0.1";  // how the coordinator reaches this worker
  int64_t register_timeout_ms = 120000;
  int64_t coordinator_lost_ms = 5000;     // exit after this long without the coordinator
  int rank = 0;                           // the rank this worker claims
  bool shared_memory_collectives = true;  // shared memory when all ranks are on this host
  // GPU ranks use the CPU collectives above, staged through host memory, not NCCL: several ranks
  // on one GPU (collectives/host_staged_communicator.h). Turns CUDA graphs off.
  bool host_staged_collectives = false;
  // A GPU rank alone (world size 1) still forms an NCCL communicator and runs every collective
  // through it, where it would otherwise skip them: NCCL's enqueue, capture and watchdog run on a
  // one-GPU machine.
  bool nccl_at_world_size_one = false;
  std::string device = "auto";        // --device (model/device.h); "cuda": GPU rank mod count
  int64_t cuda_graph_max_batch = 64;  // --cuda-graph-max-batch (0: no CUDA graphs)
  int64_t warmup_tokens = 256;        // --warmup-tokens (RankWorkerOptions; 0: none)
  // Internal channel security: a shared token every internal call carries
  // (empty: none) and the credentials of this worker's service and of its
  // channel to the coordinator (null: plaintext).
  std::string internal_token;
  std::shared_ptr<grpc::ServerCredentials> server_credentials;
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials;
};

// The StatefulSet pod ordinal at the end of a hostname ("shardlm-worker-3" is
// 3); InvalidArgument when the name has no "-N" suffix.
absl::StatusOr<int> OrdinalFromHostname(const std::string& hostname);

// Returns the process exit code. `stop` is set by signal handlers.
int RunWorkerProcess(const WorkerProcessOptions& options, const std::atomic<bool>* stop);

}  // namespace shardlm
