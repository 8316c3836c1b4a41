#include "coordinator/router/running_calls.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace shardlm {

absl::Status RunningCalls::Add(const std::string& owner, const std::string& id, std::function<void()> stop) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!calls_.emplace(std::make_pair(owner, id), std::move(stop)).second) {
    return WithField(absl::AlreadyExistsError(absl::StrCat(
                         "request_id '", id, "' is already running; request ids must be unique")),
                     "request_id");
  }
  return absl::OkStatus();
}

void RunningCalls::Remove(const std::string& owner, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  calls_.erase(std::make_pair(owner, id));
}

int RunningCalls::Abort(const std::string& owner, const std::vector<std::string>& ids) {
  std::vector<std::function<void()>> stops;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& id : ids) {
      auto it = calls_.find(std::make_pair(owner, id));
      if (it != calls_.end()) stops.push_back(it->second);
    }
  }
  for (auto& stop : stops) stop();  // outside the lock: a stop may finish its call
  return static_cast<int>(stops.size());
}

int RunningCalls::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(calls_.size());
}

}  // namespace shardlm
