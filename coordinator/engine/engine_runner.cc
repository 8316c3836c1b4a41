#include "coordinator/engine/engine_runner.h"

#include <utility>

namespace shardlm {

EngineRunner::~EngineRunner() {
  if (queued_) engine_->ApplyStep(*queued_, engine_->WaitStep(*queued_, *queued_pending_)).IgnoreError();
}

absl::Status EngineRunner::Step() {
  std::unique_ptr<PlannedStep> plan = engine_->PlanStep();
  if (!plan) return absl::OkStatus();
  std::unique_ptr<PendingStep> pending = engine_->StartStep(*plan);
  return engine_->ApplyStep(*plan, engine_->WaitStep(*plan, *pending));
}

absl::Status EngineRunner::StepOverlapped() {
  if (!engine_->overlaps()) return Step();
  if (!queued_) {
    queued_ = engine_->PlanStep();
    if (!queued_) return absl::OkStatus();
    queued_pending_ = engine_->StartStep(*queued_);
  }
  std::unique_ptr<PlannedStep> next = engine_->PlanStep(/*ahead=*/true);
  std::unique_ptr<PendingStep> next_pending = next ? engine_->StartStep(*next) : nullptr;
  absl::Status st = engine_->ApplyStep(*queued_, engine_->WaitStep(*queued_, *queued_pending_));
  if (next) engine_->SendFollowingMasks(*next, *next_pending);
  queued_ = std::move(next);
  queued_pending_ = std::move(next_pending);
  return st;
}

absl::StatusOr<EngineResult> EngineRunner::Run(EngineRequest request) {
  absl::StatusOr<int64_t> id = engine_->Submit(std::move(request));
  if (!id.ok()) return id.status();
  absl::Status stepped = absl::OkStatus();
  while (true) {
    for (auto& [done, result] : engine_->TakeFinished()) finished_.emplace(done, std::move(result));
    auto it = finished_.find(*id);
    if (it != finished_.end()) {
      EngineResult r = std::move(it->second);
      finished_.erase(it);
      if (!r.status.ok()) return r.status;
      return r;
    }
    // A failed step fails the request in it (its result says so above); one
    // not in that step gets the step's error.
    if (!stepped.ok()) return stepped;
    stepped = Step();
  }
}

std::map<int64_t, EngineResult> EngineRunner::TakeFinished() {
  std::map<int64_t, EngineResult> out = std::move(finished_);
  finished_.clear();
  for (auto& [id, result] : engine_->TakeFinished()) out.emplace(id, std::move(result));
  return out;
}

}  // namespace shardlm
