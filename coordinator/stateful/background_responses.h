// Responses created with background: true (docs/stateful_apis.md section 6):
// each generates on a thread of its own after its create has answered, at most
// `limit` at once, and can be cancelled by id while it runs here. Stop cancels
// them all and waits for each to write its end.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace shardlm {
namespace stateful {

class BackgroundResponses {
 public:
  // A job generates and stores one response; `cancel` turns true when it is to stop.
  using Job = std::function<void(const std::atomic<bool>& cancel)>;

  explicit BackgroundResponses(int limit) : limit_(limit) {}
  ~BackgroundResponses() { Stop(); }
  BackgroundResponses(const BackgroundResponses&) = delete;
  BackgroundResponses& operator=(const BackgroundResponses&) = delete;

  int limit() const { return limit_; }
  // Whether another may start now (a create checks before it stores anything).
  bool HasRoom();
  // Runs `job` for response `id` on a new thread; false when `limit` run already or when stopping.
  bool Start(const std::string& id, Job job);
  // Asks response `id` to stop and waits up to `wait` for its job to end (its end stored); false
  // when it does not run here.
  bool Cancel(const std::string& id, std::chrono::milliseconds wait);
  // The responses generating here.
  std::vector<std::string> Running();
  // Cancels every job, takes no more, and waits until each has ended.
  void Stop();

 private:
  void Run(const std::string& id, Job job, std::shared_ptr<std::atomic<bool>> cancel);

  const int limit_;
  std::mutex mu_;
  std::condition_variable ended_;
  std::map<std::string, std::shared_ptr<std::atomic<bool>>> running_;  // response id -> its cancel flag
  bool stopping_ = false;
};

}  // namespace stateful
}  // namespace shardlm
