#include "coordinator/serving/engine_loop.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace shardlm {

EngineLoop::EngineLoop(std::unique_ptr<Engine> engine, std::function<GroupState()> group)
    : engine_(std::move(engine)), group_(std::move(group)) {
  if (group_) epoch_ = group_().epoch;
  thread_ = std::thread([this] { Run(); });
}

absl::Status EngineLoop::FollowGroup() {
  if (!group_) return absl::OkStatus();
  const GroupState g = group_();
  if (in_flight_) {
    // The loop thread follows the group once the step in flight is applied.
    return g.serving ? absl::OkStatus() : g.failure;
  }
  if (g.epoch != epoch_ && g.serving) {
    // Formed again: whatever ran on the old group is gone with its KV.
    engine_->FailAll(absl::UnavailableError("the tensor-parallel group was formed again"));
    Deliver();
    engine_->Reset(g.num_blocks, absl::StrCat("its KV cache was on the tensor-parallel group of epoch ",
                                              epoch_, ", which failed and was formed again"));
    epoch_ = g.epoch;
  }
  if (!g.serving) {
    engine_->FailAll(g.failure);
    Deliver();
    return g.failure;
  }
  return absl::OkStatus();
}

EngineLoop::~EngineLoop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (auto& fn : outbox_) fn();
  // Anything still waiting is told so.
  for (auto& [id, done] : waiting_) {
    EngineResult r;
    r.status = absl::UnavailableError("server shutting down");
    done(std::move(r));
  }
}

absl::StatusOr<int64_t> EngineLoop::Submit(EngineRequest request, DoneFn on_done) {
  std::lock_guard<std::mutex> lock(mu_);  // validation reads the handle table
  if (stop_) return absl::UnavailableError("server shutting down");
  if (absl::Status down = FollowGroup(); !down.ok()) return down;
  if (request.on_token) {
    // Called by the engine under the lock: queue the call for the loop
    // thread, which makes it with the lock released.
    request.on_token = [this, fn = std::move(request.on_token)](int32_t token, float logprob,
                                                                const std::vector<TopLogprob>& top) {
      outbox_.push_back([fn, token, logprob, top] { fn(token, logprob, top); });
    };
  }
  auto id = engine_->Submit(std::move(request));
  if (!id.ok()) return id.status();
  waiting_[*id] = std::move(on_done);
  cv_.notify_all();
  return *id;
}

void EngineLoop::Cancel(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (engine_->Cancel(id)) Deliver();
}

void EngineLoop::Stop(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (engine_->Stop(id)) Deliver();
}

absl::Status EngineLoop::Validate(const EngineRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  return engine_->Validate(request);
}

absl::Status EngineLoop::ReleaseHandle(const std::string& handle, const std::string& owner) {
  std::lock_guard<std::mutex> lock(mu_);
  FollowGroup().IgnoreError();  // handles of a failed group are already gone
  return engine_->ReleaseHandle(handle, owner);
}

absl::Status EngineLoop::ReleaseHandles(const std::vector<std::string>& handles, const std::string& owner) {
  std::lock_guard<std::mutex> lock(mu_);
  FollowGroup().IgnoreError();  // handles of a failed group are already gone
  for (const std::string& h : handles) {
    absl::Status st = engine_->CheckHandle(h, owner);
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat(st.message(), "; no handle was released"));
  }
  for (const std::string& h : handles) {
    absl::Status st = engine_->ReleaseHandle(h, owner);
    if (!st.ok() && st.code() != absl::StatusCode::kNotFound) return st;  // a duplicate is released once
  }
  return absl::OkStatus();
}

int EngineLoop::pending() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(waiting_.size());
}

Engine::Stats EngineLoop::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  return engine_->stats();
}

void EngineLoop::Deliver() {
  bool any = false;
  for (auto& [id, result] : engine_->TakeFinished()) {
    auto it = waiting_.find(id);
    if (it == waiting_.end()) continue;
    outbox_.push_back(
        [done = std::move(it->second), r = std::move(result)]() mutable { done(std::move(r)); });
    waiting_.erase(it);
    any = true;
  }
  if (any) cv_.notify_all();  // the loop thread hands them over
}

void EngineLoop::Dispatch(std::unique_lock<std::mutex>& lock) {
  while (!outbox_.empty()) {
    std::vector<std::function<void()>> calls;
    calls.swap(outbox_);
    lock.unlock();
    for (auto& fn : calls) fn();
    lock.lock();
  }
}

void EngineLoop::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  // The step on the workers, and (overlapped steps) the one queued behind it.
  std::unique_ptr<Engine::PlannedStep> plan, next;
  std::unique_ptr<PendingStep> pending, next_pending;
  while (true) {
    Dispatch(lock);
    if (!plan) {
      if (stop_) break;
      if (!FollowGroup().ok()) {
        // The group is down: nothing can run until it is formed again.
        cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stop_ || !outbox_.empty(); });
        continue;
      }
      if (engine_->Idle()) {
        // Idle: wake up now and then so expired handles free their blocks.
        cv_.wait_for(lock, std::chrono::seconds(1),
                     [&] { return stop_ || !outbox_.empty() || !engine_->Idle(); });
        engine_->ExpireHandles();
        continue;
      }
      plan = engine_->PlanStep();
      Deliver();  // a request the cache cannot hold fails while planning
      if (!plan) {
        Dispatch(lock);
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
        continue;
      }
      in_flight_ = true;
      pending = engine_->StartStep(*plan);
    }
    // While the workers run `plan`, the next step is planned and queued
    // behind it (docs/scheduler.md, overlapped steps).
    if (engine_->overlaps() && !stop_ && FollowGroup().ok()) {
      next = engine_->PlanStep(/*ahead=*/true);
      Deliver();
      if (next) next_pending = engine_->StartStep(*next);
    }
    // The workers run the step without the lock: Submit, Cancel, GetStats
    // and the handle calls go on meanwhile (docs/scheduler.md).
    lock.unlock();
    auto results = engine_->WaitStep(*plan, *pending);
    lock.lock();
    absl::Status st = engine_->ApplyStep(*plan, std::move(results));
    if (!st.ok()) LOG(WARNING) << "engine step failed: " << st;
    // The constraint masks of the step queued behind, which needed this one's tokens.
    if (next) engine_->SendFollowingMasks(*next, *next_pending);
    Deliver();
    plan = std::move(next);
    pending = std::move(next_pending);
    in_flight_ = plan != nullptr;
  }
  Dispatch(lock);
}

}  // namespace shardlm
