// A coordinator's tensor-parallel workers: the internal endpoint they register
// with, optionally the local worker processes themselves, and the executor
// that drives them.
//
//   WorkerGroupOptions o{.model_dir = dir, .tp = 2, .spawn_local = true, .exe = "/proc/self/exe"};
//   SHARDLM_ASSIGN_OR_RETURN(auto group, WorkerGroup::Start(o));
//   Engine engine(group->executor(), cfg, group->executor()->num_blocks(), ...);
//   // ~WorkerGroup: SIGTERM to local workers, SIGKILL after a grace period, reaped.
//
// Local workers die with their parent (PR_SET_PDEATHSIG), so a crashed
// coordinator leaves no orphans; a worker whose coordinator is unreachable
// exits on its own (worker_server.h).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/remote_executor.h"

namespace grpc {
class Server;
}

namespace shardlm {

class RendezvousService;

struct WorkerGroupOptions {
  std::string model_dir;
  int tp = 1;
  std::string dtype = "auto";
  int64_t kv_cache_bytes = 256ll << 20;  // per rank
  int64_t block_size = 16;
  int64_t collective_timeout_ms = 10000;
  int64_t step_timeout_ms = 60000;     // one step (e.g. a long prefill) on every rank
  std::string listen = "127.0.0.1:0";  // the workers' endpoint
  bool spawn_local = true;             // start `tp` worker processes here
  std::string exe;                     // the shardlm binary, for spawning
  int64_t start_timeout_ms = 120000;
  int worker_log_level = 0;  // 0 INFO, 1 WARNING, 2 ERROR
  int worker_threads = 0;    // compute threads per local worker; 0: cores / tp
};

class WorkerGroup {
 public:
  static absl::StatusOr<std::unique_ptr<WorkerGroup>> Start(const WorkerGroupOptions& options);
  ~WorkerGroup();

  RemoteExecutor* executor() { return executor_.get(); }
  const std::string& worker_endpoint() const { return endpoint_; }
  // Local worker processes that exited (crashed or killed) since start.
  int dead_workers() const { return dead_.load(); }

 private:
  WorkerGroup() = default;
  void Spawn(int count);
  void StopChildren();

  WorkerGroupOptions options_;
  std::unique_ptr<RendezvousService> rendezvous_;
  std::unique_ptr<grpc::Server> server_;
  std::string endpoint_;
  std::unique_ptr<RemoteExecutor> executor_;
  std::mutex children_mu_;
  std::vector<pid_t> children_;  // -1 once reaped
  std::thread reaper_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> dead_{0};
};

}  // namespace shardlm
