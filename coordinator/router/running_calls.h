// The Generate calls of vLLM's engine protocol that are running, by the request id each
// carries, so that Abort can end them (the gateway sends one when its client leaves). Ids are
// the caller's: with API keys on, a key sees only the ids of its own calls (owner "" when keys
// are off). A request id is one running call at a time: a second is ALREADY_EXISTS.
//
//   RunningCalls calls;
//   SHARDLM_RETURN_IF_ERROR(calls.Add(owner, id, [weak] { if (auto c = weak.lock()) c->Stop(...); }));
//   ... when the call has finished: calls.Remove(owner, id);
//   int ended = calls.Abort(owner, {"chatcmpl-1", "chatcmpl-2"});
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace shardlm {

class RunningCalls {
 public:
  // Registers `owner`'s call `id`, which `stop` ends; ALREADY_EXISTS naming request_id when
  // one of the owner's running calls has it.
  absl::Status Add(const std::string& owner, const std::string& id, std::function<void()> stop);
  void Remove(const std::string& owner, const std::string& id);
  // Ends `owner`'s running calls among `ids` (unknown or finished ids are skipped, as the call
  // may have ended meanwhile); returns how many were running.
  int Abort(const std::string& owner, const std::vector<std::string>& ids);
  int size() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, std::function<void()>> calls_;  // (owner, id)
};

}  // namespace shardlm
