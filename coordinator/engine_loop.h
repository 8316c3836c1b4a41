// Runs an Engine on its own thread so that many RPC handlers can share it.
//
// Handlers submit requests (validated at once, before queueing) and get
// their tokens through the request's on_token and the result through on_done,
// both called on the loop thread: keep them short (push into a queue). A
// client that goes away cancels its request, which frees its blocks at once.
//
//   EngineLoop loop(std::move(engine));
//   SHARDLM_ASSIGN_OR_RETURN(int64_t id, loop.Submit(std::move(req), [&](GenerateResult r) { ... }));
//   loop.Cancel(id);
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "coordinator/engine.h"

namespace shardlm {

class EngineLoop {
 public:
  using DoneFn = std::function<void(GenerateResult)>;

  explicit EngineLoop(std::unique_ptr<Engine> engine);
  ~EngineLoop();

  absl::StatusOr<int64_t> Submit(GenerateRequest request, DoneFn on_done);
  // Submit's checks without submitting.
  absl::Status Validate(const GenerateRequest& request);
  void Cancel(int64_t id);
  // Ends a running request now as finished ("stop"), keeping its handle when asked.
  void Stop(int64_t id);
  absl::Status ReleaseHandle(const std::string& handle);
  Engine::Stats stats();
  const ModelConfig& config() const { return engine_->config(); }
  int32_t num_blocks() const { return engine_->num_blocks(); }
  // Free KV blocks right now (for stats and the idle invariant).
  int32_t num_free_blocks();

 private:
  void Run();
  void Deliver();  // hands finished results to their callbacks; mu_ held

  std::unique_ptr<Engine> engine_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, DoneFn> waiting_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace shardlm
