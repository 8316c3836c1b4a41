// The KV of each conversation kept on the workers between its turns
// (docs/stateful_apis.md section 5): a thread, a conversation or a response
// files the ChunkResult handle of its last turn (prompt and reply), and its
// next turn attaches the part of it that its new prompt begins with, so that
// only what was added is prefilled. A miss (no entry, an expired or lost
// handle, a history that differs from the first token) costs a full prefill,
// never a different answer: the prompt is always rendered whole from the store.
//
//   KvTurnCache::Use use = turns.Find("thread_x", owner, prompt);   // {handle, length}
//   ... submit with prefix_handle = use.handle, prefix_length = use.length, the rest of prompt
//   turns.Put("thread_x", owner, kept.handle, prompt + kept.tokens, kept.handle_expiry_ms);
//
// Entries are bounded (least recently used released first) and live no longer than their
// handle (--handle-ttl-s); kept handles count against --max-handle-share like any other.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace shardlm {

class EngineLoop;

namespace stateful {

class KvTurnCache {
 public:
  // `loop` releases the handles; null: nothing is kept (Find finds nothing, Put releases nothing).
  explicit KvTurnCache(EngineLoop* loop, size_t max_entries = 4096)
      : loop_(loop), max_entries_(max_entries) {}

  struct Use {
    std::string handle;  // empty: none
    int32_t length = 0;  // the prompt's first tokens the handle holds
  };
  // The handle filed under `key` for `owner`, and the longest prefix of `prompt` it holds (at
  // most all but the prompt's last token, which is prefilled for the next token's logits).
  Use Find(const std::string& key, const std::string& owner, const std::vector<int32_t>& prompt);
  // Files `handle` (holding `tokens`, expiring at `expiry_ms`, Unix ms) under `key`; the handle
  // it replaces is released, and the least recently used entry when there are too many.
  void Put(const std::string& key, const std::string& owner, const std::string& handle,
           std::vector<int32_t> tokens, int64_t expiry_ms);
  // Forgets `key`'s entry and releases its handle (a deleted thread, response or conversation).
  void Drop(const std::string& key);
  // Forgets `key`'s entry if it still holds `handle`, which the engine no longer has (expired,
  // or lost when the worker group re-formed).
  void Lost(const std::string& key, const std::string& handle);
  // Releases the least recently used entry but `keep`'s: a turn found no room to keep its KV.
  void ReleaseOldest(const std::string& keep);
  size_t size();

 private:
  struct Entry {
    std::string owner, handle;
    std::vector<int32_t> tokens;
    int64_t expiry_ms = 0;
    std::list<std::string>::iterator age;  // its place in lru_
  };
  // Removes `it` (the lock held); returns its handle and owner for releasing after the lock.
  std::pair<std::string, std::string> Remove(std::map<std::string, Entry>::iterator it);
  void Release(const std::pair<std::string, std::string>& handle_owner);

  EngineLoop* loop_;
  const size_t max_entries_;
  std::mutex mu_;
  std::map<std::string, Entry> entries_;
  std::list<std::string> lru_;  // keys, most recently used first
};

}  // namespace stateful
}  // namespace shardlm
