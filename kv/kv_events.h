// Changes to the prefix cache, as routers that track where a prefix is
// cached (llm-d, NVIDIA Dynamo) read them: a full block was published
// (stored) under the hash of its token prefix, a published block was evicted
// (removed), or the whole cache was dropped (cleared). See docs/kv_events.md.
//
// The BlockAllocator records evictions and the KvManager the blocks it
// publishes, both into one KvEventLog, so the order of events is the order
// of the changes. The engine hands each step's events to a KvEventSink
// (coordinator/events/ publishes them over ZeroMQ in vLLM's format).
//
//   KvEventLog log;
//   log.Stored(h1, std::nullopt, tokens, 16);   // block 0
//   log.Stored(h2, h1, tokens + 16, 16);         // joins the event above: same chain
//   log.Removed(h0);
//   std::vector<KvEvent> events = log.Take();    // two events; the log is empty again
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace shardlm {

struct KvEvent {
  enum class Kind { kStored, kRemoved, kAllCleared };
  Kind kind = Kind::kStored;
  // kStored: the prefix hashes of consecutive blocks, each block's parent
  // the one before it; kRemoved: the evicted blocks' hashes.
  std::vector<uint64_t> hashes;
  // kStored: the hash of the block before the first; none for a prompt's first block.
  std::optional<uint64_t> parent;
  std::vector<int32_t> tokens;  // kStored: every block's tokens, in order
};

class KvEventLog {
 public:
  // A block published under `hash`, following the block published under
  // `parent`. Joins the last event when that one ends with `parent`.
  void Stored(uint64_t hash, std::optional<uint64_t> parent, const int32_t* tokens, int32_t count);
  // A published block evicted. Joins the last event when it is a removal too.
  void Removed(uint64_t hash);
  // Every block dropped (the KV pool was made anew): what came before is moot.
  void AllCleared();
  // The events since the last Take, oldest first.
  std::vector<KvEvent> Take();
  bool empty() const { return events_.empty(); }

 private:
  std::vector<KvEvent> events_;
};

// Where the engine hands each step's events (when one is set).
class KvEventSink {
 public:
  virtual ~KvEventSink() = default;
  // Called from the engine's driver with its lock held: must not block.
  virtual void Publish(std::vector<KvEvent> events) = 0;
};

}  // namespace shardlm
