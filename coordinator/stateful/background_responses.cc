#include "coordinator/stateful/background_responses.h"

#include <exception>
#include <thread>

#include "common/logging.h"

namespace shardlm {
namespace stateful {

bool BackgroundResponses::HasRoom() {
  std::lock_guard<std::mutex> lock(mu_);
  return !stopping_ && static_cast<int>(running_.size()) < limit_;
}

bool BackgroundResponses::Start(const std::string& id, Job job) {
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || static_cast<int>(running_.size()) >= limit_) return false;
    running_[id] = cancel;
  }
  // Detached: Stop waits on running_, which the thread leaves last of all.
  std::thread([this, id, job = std::move(job), cancel]() mutable {
    Run(id, std::move(job), cancel);
  }).detach();
  return true;
}

void BackgroundResponses::Run(const std::string& id, Job job, std::shared_ptr<std::atomic<bool>> cancel) {
  try {
    job(*cancel);
  } catch (const std::exception& e) {
    LOG(ERROR) << "background response " << id << ": " << e.what();
  }
  job = nullptr;  // what it holds goes before Stop can return
  std::lock_guard<std::mutex> lock(mu_);
  running_.erase(id);
  ended_.notify_all();
}

bool BackgroundResponses::Cancel(const std::string& id, std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = running_.find(id);
  if (it == running_.end()) return false;
  it->second->store(true);
  ended_.wait_for(lock, wait, [&] { return running_.count(id) == 0; });
  return true;
}

std::vector<std::string> BackgroundResponses::Running() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> ids;
  for (const auto& [id, cancel] : running_) ids.push_back(id);
  return ids;
}

void BackgroundResponses::Stop() {
  std::unique_lock<std::mutex> lock(mu_);
  stopping_ = true;
  for (auto& [id, cancel] : running_) cancel->store(true);
  ended_.wait(lock, [&] { return running_.empty(); });
}

}  // namespace stateful
}  // namespace shardlm
