#include "coordinator/stateful/run_executor.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/random_token.h"

namespace shardlm {
namespace stateful {
namespace {

constexpr int kHeartbeatS = 5;
constexpr int kStaleAfterS = 15;  // three heartbeats missed: the instance stopped

std::string HostName() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

bool PidAlive(int64_t pid) { return pid > 0 && (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH); }

}  // namespace

int64_t NowSeconds() { return absl::ToUnixSeconds(absl::Now()); }

RunExecutor::RunExecutor(ServingCore* core, StateStore* store, RunExecutorOptions options)
    : core_(core),
      store_(store),
      options_(std::move(options)),
      instance_(RandomId("inst_")),
      host_(HostName()) {}

RunExecutor::~RunExecutor() {
  Stop();
  for (std::thread& t : threads_) t.join();
  if (heartbeat_.joinable()) heartbeat_.join();
}

void RunExecutor::StopClaiming() {
  std::lock_guard<std::mutex> lock(mu_);
  claiming_ = false;
}

void RunExecutor::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    claiming_ = false;
    shutting_down_ = true;
    for (auto& [id, flag] : running_) flag->store(true);
  }
  wake_.notify_all();
  beat_.notify_all();
  absl::Status st = store_->RemoveInstance(instance_);  // a clean stop leaves no row to reap
  if (!st.ok()) LOG(WARNING) << "state: this instance's row was not removed: " << st;
}

absl::Status RunExecutor::Start() {
  absl::Status st = store_->Heartbeat(instance_, host_, getpid(), NowSeconds());
  if (!st.ok()) return st;
  Reap();
  for (int i = 0; i < options_.threads; ++i) threads_.emplace_back([this] { Work(); });
  heartbeat_ = std::thread([this] { Heartbeats(); });
  return absl::OkStatus();
}

void RunExecutor::Enqueue(const RunRow& run) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(run);
  }
  wake_.notify_one();
}

void RunExecutor::Cancel(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = running_.find(id);
  if (it != running_.end()) it->second->store(true);
}

void RunExecutor::Work() {
  while (true) {
    RunRow run;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [this] { return stopping_ || (claiming_ && !queue_.empty()); });
      if (stopping_) return;  // queued runs stay queued in the store: the next start runs them
      run = std::move(queue_.front());
      queue_.pop_front();
    }
    Execute(run, nullptr);
  }
}

void RunExecutor::Heartbeats() {
  std::unique_lock<std::mutex> lock(mu_);
  auto next_beat = std::chrono::steady_clock::now() + std::chrono::seconds(kHeartbeatS);
  while (!beat_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; })) {
    lock.unlock();
    StopCancelledElsewhere();
    if (options_.each_second) options_.each_second();
    // By the clock, not by ticks: slow polls above must not space the heartbeats out.
    if (std::chrono::steady_clock::now() >= next_beat) {
      next_beat = std::chrono::steady_clock::now() + std::chrono::seconds(kHeartbeatS);
      absl::Status st = store_->Heartbeat(instance_, host_, getpid(), NowSeconds());
      if (!st.ok()) LOG(WARNING) << "state: heartbeat not stored: " << st;
      Reap();
    }
    lock.lock();
  }
}

void RunExecutor::StopCancelledElsewhere() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (running_.empty()) return;
  }
  absl::StatusOr<std::vector<std::string>> ids = store_->RunsToStop(instance_);
  if (!ids.ok()) return;  // the next second asks again
  for (const std::string& id : *ids) Cancel(id);
}

void RunExecutor::Reap() {
  const int64_t now = NowSeconds();
  absl::StatusOr<std::vector<RunRow>> queued =
      store_->ReapRuns(instance_, host_, now, now - kStaleAfterS, PidAlive);
  if (!queued.ok()) {
    LOG(WARNING) << "state: reaping the runs of stopped servers failed: " << queued.status();
    return;
  }
  for (const RunRow& run : *queued) Enqueue(run);
  // Queued or waiting for tool outputs past expires_at (10 minutes, as OpenAI): expired.
  absl::StatusOr<int64_t> expired = store_->ExpireRuns(now);
  if (!expired.ok()) LOG(WARNING) << "state: expiring runs failed: " << expired.status();
}

std::shared_ptr<std::atomic<bool>> RunExecutor::Track(const std::string& id) {
  auto flag = std::make_shared<std::atomic<bool>>(false);
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) flag->store(true);
  running_[id] = flag;
  return flag;
}

void RunExecutor::Untrack(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  running_.erase(id);
}

}  // namespace stateful
}  // namespace shardlm
