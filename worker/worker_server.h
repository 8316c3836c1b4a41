// The `shardlm worker` process: serves shardlm.worker.v1.Worker for one rank.
//
// Start-up: serve the Worker service on --listen, register with the
// coordinator (which answers once every rank has joined, with this rank's
// number and settings), bootstrap the collectives through the coordinator's
// store, load this rank's shard, allocate the KV pool, then answer
// Handshake. Steps run one at a time. The process exits when asked (SIGTERM,
// SIGINT) or when the coordinator has been unreachable for a few seconds, so
// a worker never outlives its group.
//
//   WorkerProcessOptions o{.coordinator = "10.0.0.1:50052", .model_dir = "/models/llama"};
//   return RunWorkerProcess(o, &stop_flag);
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace shardlm {

inline constexpr uint32_t kWorkerProtocolVersion = 1;

struct WorkerProcessOptions {
  std::string coordinator;  // host:port of the coordinator's worker endpoint
  std::string model_dir;
  std::string listen = "127.0.0.1:0";        // port 0: any free port
  std::string advertise_host = "127.0.0.1";  // how the coordinator reaches this worker
  int64_t register_timeout_ms = 120000;
  int64_t coordinator_lost_ms = 5000;  // exit after this long without the coordinator
};

// Returns the process exit code. `stop` is set by signal handlers.
int RunWorkerProcess(const WorkerProcessOptions& options, const std::atomic<bool>* stop);

}  // namespace shardlm
