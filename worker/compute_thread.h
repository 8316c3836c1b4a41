// Runs a worker's forward steps on one long-lived thread.
//
// libgomp gives every thread that opens an OpenMP parallel region a team of
// its own. gRPC's sync server hands successive Step calls to whichever pool
// thread is free, so each of those threads grew a team, and the idle teams'
// spin-waiting took CPU from the running one: a tp-1 worker's compute was
// 9-10 ms a step against 6 in-process (docs/cpu_kernels.md). Every step now
// runs on this thread, so one team serves them all.
//
//   ComputeThread compute([n] { at::set_num_threads(n); });  // runs first, on the thread
//   compute.Run([&] { rows = worker->Execute(step); });      // blocks until done
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace shardlm {

class ComputeThread {
 public:
  // `init` runs on the new thread before anything else: a thread's OpenMP
  // settings (at::set_num_threads) are its own, not inherited.
  explicit ComputeThread(std::function<void()> init = {});
  ~ComputeThread();
  ComputeThread(const ComputeThread&) = delete;
  ComputeThread& operator=(const ComputeThread&) = delete;

  // Runs fn on the compute thread and returns when it has finished; an
  // exception fn throws is rethrown here. Callers are served one at a time.
  void Run(const std::function<void()>& fn);

 private:
  void Loop(const std::function<void()>& init);

  std::mutex call_mu_;  // one caller at a time
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void()>* task_ = nullptr;  // guarded by mu_
  bool done_ = false;                            // guarded by mu_
  std::exception_ptr error_;                     // guarded by mu_
  bool stop_ = false;                            // guarded by mu_
  std::thread thread_;
};

}  // namespace shardlm
