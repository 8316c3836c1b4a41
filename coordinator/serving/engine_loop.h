// Runs an Engine on its own thread so that many RPC handlers can share it.
//
// The lock is held while a step is planned and applied, not while the
// workers execute it. Handlers submit requests (validated at once, before
// queueing) and get their tokens through the request's on_token and the
// result through on_done, both called on the loop thread, in order, with the
// lock released (so they may call Submit, Cancel or Stop): keep them short.
// A client that goes away cancels its request, which frees its blocks at
// once (after the step executing it, if any).
//
// With a tensor-parallel group the loop follows its state: while the group
// is down every request fails at once with its failure (UNAVAILABLE naming
// the rank); when it is formed again the engine starts over on the new KV
// pool, and handles of the old one answer NOT_FOUND saying why.
//
//   EngineLoop loop(std::move(engine), [g] { return g->state(); });
//   SHARDLM_ASSIGN_OR_RETURN(int64_t id, loop.Submit(std::move(req), [&](EngineResult r) { ... }));
//   loop.Cancel(id);
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "coordinator/engine/engine.h"
#include "coordinator/group/worker_group.h"

namespace shardlm {

class EngineLoop {
 public:
  using DoneFn = std::function<void(EngineResult)>;

  // `group` (may be null: an in-process engine) reports the workers' state.
  explicit EngineLoop(std::unique_ptr<Engine> engine, std::function<GroupState()> group = nullptr);
  ~EngineLoop();

  absl::StatusOr<int64_t> Submit(EngineRequest request, DoneFn on_done);
  // Submit's checks without submitting.
  absl::Status Validate(const EngineRequest& request);
  void Cancel(int64_t id);
  // Ends a running request now as finished ("stop"), keeping its handle when asked.
  void Stop(int64_t id);
  absl::Status ReleaseHandle(const std::string& handle, const std::string& owner = "");
  // Releases every handle or none: NotFound naming the first that `owner`
  // does not hold, and then nothing is released.
  absl::Status ReleaseHandles(const std::vector<std::string>& handles, const std::string& owner);
  // Requests submitted and not yet delivered.
  int pending();
  Engine::Stats stats();
  const ModelConfig& config() const { return engine_->config(); }
  int32_t num_blocks() { return stats().num_blocks; }
  // Sequences the queue holds at once (--max-queued-requests): a call that needs
  // more at once can never run.
  int32_t max_queued_requests() const { return engine_->options().max_queued_requests; }
  // Free KV blocks right now (for stats and the idle invariant).
  int32_t num_free_blocks() { return stats().free_blocks; }

 private:
  void Run();
  void Deliver();  // queues finished results for their callbacks; mu_ held
  // Makes the queued callbacks, with the lock released meanwhile.
  void Dispatch(std::unique_lock<std::mutex>& lock);
  // Follows the group's state; its failure while it is down. mu_ held.
  absl::Status FollowGroup();

  std::unique_ptr<Engine> engine_;
  std::function<GroupState()> group_;
  uint64_t epoch_ = 0;  // of the group the engine's KV lives on
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, DoneFn> waiting_;
  std::vector<std::function<void()>> outbox_;  // callbacks for the loop thread to make, in order
  bool stop_ = false;
  bool in_flight_ = false;  // a step is on the workers (the lock is free meanwhile)
  std::thread thread_;
};

}  // namespace shardlm
