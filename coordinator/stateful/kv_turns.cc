#include "coordinator/stateful/kv_turns.h"

#include <algorithm>
#include <chrono>

#include "coordinator/serving/engine_loop.h"

namespace shardlm {
namespace stateful {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

KvTurnCache::Use KvTurnCache::Find(const std::string& key, const std::string& owner,
                                   const std::vector<int32_t>& prompt) {
  std::pair<std::string, std::string> stale;
  Use use;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second.owner != owner) return use;
    if (it->second.expiry_ms <= NowMs()) {
      Remove(it);  // the engine let it expire: nothing to release
      return use;
    }
    const std::vector<int32_t>& held = it->second.tokens;
    const size_t most = std::min(held.size(), prompt.empty() ? 0 : prompt.size() - 1);
    const size_t common = static_cast<size_t>(
        std::mismatch(held.begin(), held.begin() + most, prompt.begin()).first - held.begin());
    lru_.splice(lru_.begin(), lru_, it->second.age);
    if (common == 0) return use;
    use.handle = it->second.handle;
    use.length = static_cast<int32_t>(common);
  }
  return use;
}

void KvTurnCache::Put(const std::string& key, const std::string& owner, const std::string& handle,
                      std::vector<int32_t> tokens, int64_t expiry_ms) {
  std::vector<std::pair<std::string, std::string>> released;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) released.push_back(Remove(it));
    lru_.push_front(key);
    entries_[key] = Entry{owner, handle, std::move(tokens), expiry_ms, lru_.begin()};
    while (entries_.size() > max_entries_) released.push_back(Remove(entries_.find(lru_.back())));
  }
  for (const auto& r : released) Release(r);
}

void KvTurnCache::Drop(const std::string& key) {
  std::pair<std::string, std::string> released;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    released = Remove(it);
  }
  Release(released);
}

void KvTurnCache::Lost(const std::string& key, const std::string& handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it != entries_.end() && it->second.handle == handle) Remove(it);
}

void KvTurnCache::ReleaseOldest(const std::string& keep) {
  std::pair<std::string, std::string> released;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto key = lru_.rbegin(); key != lru_.rend(); ++key) {
      if (*key == keep) continue;
      released = Remove(entries_.find(*key));
      break;
    }
  }
  if (!released.first.empty()) Release(released);
}

size_t KvTurnCache::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

std::pair<std::string, std::string> KvTurnCache::Remove(std::map<std::string, Entry>::iterator it) {
  std::pair<std::string, std::string> out{it->second.handle, it->second.owner};
  lru_.erase(it->second.age);
  entries_.erase(it);
  return out;
}

void KvTurnCache::Release(const std::pair<std::string, std::string>& handle_owner) {
  // NOT_FOUND: it expired or was lost meanwhile; nothing is left to free either way.
  if (loop_ != nullptr) loop_->ReleaseHandle(handle_owner.first, handle_owner.second).IgnoreError();
}

}  // namespace stateful
}  // namespace shardlm
