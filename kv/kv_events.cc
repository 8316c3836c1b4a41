#include "kv/kv_events.h"

#include <utility>

namespace shardlm {

void KvEventLog::Stored(uint64_t hash, std::optional<uint64_t> parent, const int32_t* tokens, int32_t count) {
  const bool joins = !events_.empty() && events_.back().kind == KvEvent::Kind::kStored &&
                     parent.has_value() && events_.back().hashes.back() == *parent;
  if (!joins) {
    KvEvent e;
    e.kind = KvEvent::Kind::kStored;
    e.parent = parent;
    events_.push_back(std::move(e));
  }
  KvEvent& e = events_.back();
  e.hashes.push_back(hash);
  e.tokens.insert(e.tokens.end(), tokens, tokens + count);
}

void KvEventLog::Removed(uint64_t hash) {
  if (events_.empty() || events_.back().kind != KvEvent::Kind::kRemoved) {
    KvEvent e;
    e.kind = KvEvent::Kind::kRemoved;
    events_.push_back(std::move(e));
  }
  events_.back().hashes.push_back(hash);
}

void KvEventLog::AllCleared() {
  events_.clear();
  KvEvent e;
  e.kind = KvEvent::Kind::kAllCleared;
  events_.push_back(std::move(e));
}

std::vector<KvEvent> KvEventLog::Take() {
  std::vector<KvEvent> out;
  out.swap(events_);
  return out;
}

}  // namespace shardlm
