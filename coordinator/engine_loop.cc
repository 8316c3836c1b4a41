#include "coordinator/engine_loop.h"

#include "common/logging.h"

namespace shardlm {

EngineLoop::EngineLoop(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) {
  thread_ = std::thread([this] { Run(); });
}

EngineLoop::~EngineLoop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  // Anything still waiting is told so.
  for (auto& [id, done] : waiting_) {
    GenerateResult r;
    r.status = absl::UnavailableError("server shutting down");
    done(std::move(r));
  }
}

absl::StatusOr<int64_t> EngineLoop::Submit(GenerateRequest request, DoneFn on_done) {
  std::lock_guard<std::mutex> lock(mu_);  // validation reads the handle table
  if (stop_) return absl::UnavailableError("server shutting down");
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

absl::Status EngineLoop::Validate(const GenerateRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  return engine_->Validate(request);
}

absl::Status EngineLoop::ReleaseHandle(const std::string& handle) {
  std::lock_guard<std::mutex> lock(mu_);
  return engine_->ReleaseHandle(handle);
}

Engine::Stats EngineLoop::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  return engine_->stats();
}

int32_t EngineLoop::num_free_blocks() {
  std::lock_guard<std::mutex> lock(mu_);
  return engine_->num_free_blocks();
}

void EngineLoop::Deliver() {
  for (auto& [id, result] : engine_->TakeFinished()) {
    auto it = waiting_.find(id);
    if (it == waiting_.end()) continue;
    it->second(std::move(result));
    waiting_.erase(it);
  }
}

void EngineLoop::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (engine_->Idle()) {
      // Idle: wake up now and then so expired handles free their blocks.
      cv_.wait_for(lock, std::chrono::seconds(1));
      engine_->ExpireHandles();
      continue;
    }
    absl::Status st = engine_->Step();
    if (!st.ok()) LOG(WARNING) << "engine step failed: " << st;
    Deliver();
    // Let submitters and cancellers in between steps.
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
  }
}

}  // namespace shardlm
