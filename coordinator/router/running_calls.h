// The Generate calls of vLLM's engine protocol that are running, by the request id each
// carries, so that Abort can end them (the gateway sends one when its client leaves).
// A request id is one running call at a time: a second call with it is ALREADY_EXISTS.
//
//   RunningCalls calls;
//   SHARDLM_RETURN_IF_ERROR(calls.Add(id, [weak] { if (auto c = weak.lock()) c->Stop(...); }));
//   ... when the call is done: calls.Remove(id);
//   int ended = calls.Abort({"chatcmpl-1", "chatcmpl-2"});
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace shardlm {

class RunningCalls {
 public:
  // Registers the call `id`, which `stop` ends; ALREADY_EXISTS naming request_id when a
  // running call has it.
  absl::Status Add(const std::string& id, std::function<void()> stop);
  void Remove(const std::string& id);
  // Ends the running calls among `ids` (unknown or finished ids are skipped, as the call
  // may have ended meanwhile); returns how many were running.
  int Abort(const std::vector<std::string>& ids);
  int size() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::function<void()>> calls_;
};

}  // namespace shardlm
