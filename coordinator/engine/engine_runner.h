// Drives an Engine from one thread, for callers without a server around
// them: `shardlm batch` and `generate`, the benchmarks, the tests. (The
// server's driver is EngineLoop, coordinator/serving/engine_loop.h.)
//
//   EngineRunner runner(&engine);
//   SHARDLM_ASSIGN_OR_RETURN(EngineResult r, runner.Run(std::move(request)));  // one request
//   // or many: Submit them on the engine, then
//   while (!engine.Idle()) runner.StepOverlapped();
//   for (auto& [id, result] : engine.TakeFinished()) ...
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/engine/engine.h"

namespace shardlm {

class EngineRunner {
 public:
  explicit EngineRunner(Engine* engine) : engine_(engine) {}
  // Applies a step StepOverlapped left in flight, so that its sequences do
  // not stay "in flight" (and their blocks held) after the runner is gone.
  ~EngineRunner();
  EngineRunner(const EngineRunner&) = delete;
  EngineRunner& operator=(const EngineRunner&) = delete;

  // One scheduler iteration: plan, run and apply a step (nothing when
  // nothing can run). An executor failure fails the work in flight and is
  // returned; the engine stays usable.
  absl::Status Step();
  // Step with overlapped steps where the executor allows (else Step):
  // applies the step in flight after queueing the next behind it, which
  // stays in flight until the next call. Every sequence in it is unfinished,
  // so the engine is not Idle() until it is applied. Do not mix with Step.
  absl::Status StepOverlapped();
  // Submits one request and steps until it finishes: its result, or its
  // error. Results of other requests that finish meanwhile are kept for
  // TakeFinished.
  absl::StatusOr<EngineResult> Run(EngineRequest request);
  // Every finished request's result (each once), by id, with those Run set aside.
  std::map<int64_t, EngineResult> TakeFinished();

 private:
  Engine* engine_;
  // StepOverlapped's step in flight, and its rows to come.
  std::unique_ptr<PlannedStep> queued_;
  std::unique_ptr<PendingStep> queued_pending_;
  std::map<int64_t, EngineResult> finished_;  // taken from the engine while Run waited
};

}  // namespace shardlm
