// A coordinator's tensor-parallel workers: the internal endpoint they register
// with, optionally the local worker processes themselves, and the executor
// that drives them, kept serving across worker failures.
//
//   WorkerGroupOptions o{.model_dir = dir, .tp = 2, .spawn_local = true, .exe = "/proc/self/exe"};
//   SHARDLM_ASSIGN_OR_RETURN(auto group, WorkerGroup::Start(o));
//   Engine engine(group.get(), cfg, group->state().num_blocks, group->state().block_size, ...);
//   // ~WorkerGroup: SIGTERM to local workers, SIGKILL after a grace period, reaped.
//
// Recovery (docs/recovery.md): a failed step is followed by a health probe of
// every rank. If every rank is sound, only that step's requests fail. If a
// rank is dead, stopped or its collectives broke, the group stops serving
// (state().failure names the rank), the rendezvous starts a new epoch, local
// workers that exited are started again for their rank, and once every rank
// has registered again and handshaken, the group serves again with a fresh
// KV pool (the epoch in state() moves on). A supervisor thread also probes
// the ranks every second, so a failure while idle is found too. Starting,
// restarting and stopping the local worker processes is LocalWorkers' job
// (local_workers.h); a worker whose coordinator is unreachable exits on its
// own (worker_server.h).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/grpc_security.h"
#include "common/health_service.h"
#include "coordinator/engine/service_metrics.h"
#include "coordinator/group/local_workers.h"
#include "coordinator/group/remote_executor.h"

namespace grpc {
class Server;
}

namespace shardlm {

class RendezvousService;

struct WorkerGroupOptions {
  std::string model_dir;
  int tp = 1;
  std::string dtype = "auto";
  std::string weights = "auto";          // --weights (model/llama_model.h, WeightFormat)
  std::string kv_dtype = "auto";         // --kv-dtype (worker/rank_worker.h)
  std::string device = "auto";           // each local worker's --device (cuda: rank r takes GPU r)
  int64_t cuda_graph_max_batch = 64;     // each local worker's --cuda-graph-max-batch
  std::string collectives = "auto";      // each local worker's --collectives
  int64_t warmup_tokens = 256;           // each local worker's --warmup-tokens
  int64_t kv_cache_bytes = 256ll << 20;  // per rank
  int64_t block_size = 16;
  int64_t collective_timeout_ms = 10000;
  int64_t step_timeout_ms = 60000;  // a step's deadline: this plus a share per token
  int64_t step_timeout_per_token_ms = 20;
  std::string listen = "127.0.0.1:0";  // the workers' endpoint
  bool spawn_local = true;             // start `tp` worker processes here
  std::string exe;                     // the shardlm binary, for spawning
  int64_t start_timeout_ms = 120000;
  int worker_log_level = 0;  // 0 INFO, 1 WARNING, 2 ERROR
  int worker_threads = 0;    // compute threads per local worker; 0: cores / tp
  // Internal channel security: the token every internal call carries (local
  // workers get it through their environment, never argv), and the mutual-TLS
  // files serving the worker endpoint and identifying this side to workers.
  std::string internal_token;
  TlsFiles internal_tls;
  ServiceMetrics* metrics = nullptr;  // group and per-rank figures go here when set
};

// What the engine needs to know of the group, cheaply and thread-safely.
struct GroupState {
  bool serving = false;
  uint64_t epoch = 0;      // moves on each time the group is formed again
  int32_t num_blocks = 0;  // of the current formation's KV pool
  int32_t block_size = 16;
  absl::Status failure;  // why not serving (names the rank)
  int64_t restarts = 0;  // formations after the first
};

class WorkerGroup final : public StepExecutor {
 public:
  static absl::StatusOr<std::unique_ptr<WorkerGroup>> Start(const WorkerGroupOptions& options);
  ~WorkerGroup() override;

  // Runs the step on the current formation; fails fast while none serves.
  absl::StatusOr<std::vector<RowResult>> Execute(const StepInput& step) override;
  // Overlapped steps on the current formation (RemoteExecutor::StartStep);
  // a failure is judged as Execute's is.
  bool Overlaps() const override { return true; }
  std::unique_ptr<PendingStep> StartStep(const StepInput& step) override;
  GroupState state() const;
  bool serving() const { return serving_.load(); }
  // The coordinator is draining: from now on no exited worker is started
  // again and no failed group is re-formed (what runs may still finish).
  void BeginShutdown();
  // The current formation's executor (benchmarks read its timings); null
  // while the group is being re-formed.
  RemoteExecutor* executor();
  const std::string& worker_endpoint() const { return endpoint_; }

 private:
  WorkerGroup() = default;
  // Waits up to `timeout` for the rendezvous to form a group, then handshakes
  // it; `*tried` is the epoch of the formation it handshook (0 if none formed).
  absl::Status Connect(std::chrono::milliseconds timeout, uint64_t* tried = nullptr);
  // Start's parts: the rendezvous server, then the local worker processes.
  absl::Status Listen();
  void StartLocalWorkers();
  // A failed step's rows on `exec`: the group's failure if the step broke
  // it (then marked broken), else the step's own.
  absl::Status Judge(RemoteExecutor& exec, absl::Status failed);
  // Ends serving in `epoch` with `why` (once) and starts a new epoch.
  void MarkBroken(uint64_t epoch, absl::Status why);
  // The failure to report after a failed step or probe, or OK when every rank is sound.
  static absl::Status Diagnose(const std::vector<RankProbe>& probes);
  void Supervise();

  WorkerGroupOptions options_;
  std::string fingerprint_;
  RemoteExecutorOptions exec_options_;
  std::unique_ptr<RendezvousService> rendezvous_;
  std::unique_ptr<HealthService> health_;  // grpc.health.v1 on the worker endpoint
  std::unique_ptr<grpc::Server> server_;
  std::string endpoint_;

  mutable std::mutex mu_;  // guards the fields below
  std::condition_variable cv_;
  std::shared_ptr<RemoteExecutor> exec_;
  GroupState state_;
  std::atomic<bool> serving_{false};

  std::unique_ptr<LocalWorkers> local_;  // the worker processes serve started (spawn_local)
  std::thread supervisor_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> shutting_down_{false};  // BeginShutdown: no restarts, no re-forming
};

}  // namespace shardlm
