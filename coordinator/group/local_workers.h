// The local worker processes of `serve`: one `shardlm worker` child per rank,
// kept running as a Kubernetes StatefulSet would keep its pods.
//
//  - Each rank is started with fork/execve, in a process group of its own
//    (a terminal's Ctrl-C reaches the coordinator alone, which drains and
//    then stops them) and dies with the coordinator (PR_SET_PDEATHSIG). The
//    internal token travels in the environment, never on the command line.
//  - A reaper thread reaps every child that exits, so none lingers as a
//    zombie, and starts its rank again after a back-off that grows while the
//    rank keeps dying young (500 ms doubling to 10 s).
//  - StopRestarting (a draining coordinator) leaves exited ranks down; Stop
//    sends SIGTERM (and SIGCONT, for a stopped one), waits 5 s, then SIGKILLs.
//
//   LocalWorkers workers(options);   // every rank started
//   ...
//   workers.StopRestarting();        // drain
//   workers.Stop();                  // or the destructor
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace shardlm {

struct LocalWorkerOptions {
  std::string exe;          // the shardlm binary
  std::string coordinator;  // the worker endpoint the ranks register with
  std::string model_dir;
  int tp = 1;
  int log_level = 0;
  int threads = 1;  // compute threads per worker
  std::string device = "auto";
  int64_t cuda_graph_max_batch = 64;
  std::string collectives = "auto";  // the worker's --collectives
  int64_t warmup_tokens = 256;
  std::string internal_token;       // empty: --insecure-internal
  std::function<void()> restarted;  // called for each rank started again (a metric)
};

class LocalWorkers {
 public:
  explicit LocalWorkers(LocalWorkerOptions options);
  ~LocalWorkers();

  // From now on an exited rank is not started again.
  void StopRestarting() { no_restarts_ = true; }
  // Ends every rank (SIGTERM, 5 s, SIGKILL) and the reaper. Idempotent.
  void Stop();

 private:
  pid_t Spawn(int rank);
  void Reap();

  LocalWorkerOptions options_;
  struct Child {
    pid_t pid = -1;  // -1 while not running
    int64_t started_ms = 0;
    int64_t restart_at_ms = -1;  // when to start it again, or -1
    int64_t backoff_ms = 500;
  };
  std::mutex mu_;
  std::vector<Child> children_;  // by rank
  std::thread reaper_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> no_restarts_{false};
};

}  // namespace shardlm
