// Engine, part 2: what outlives a request's blocks. ChunkResult handles
// (keep, attach with copy-on-write, expire, release) and automatic prefix
// caching (look up and publish full blocks). See docs/chunk_results.md.
#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "coordinator/engine.h"
#include "coordinator/service_metrics.h"

namespace shardlm {

int64_t Engine::NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

absl::Status Engine::Attach(Sequence& seq, const Handle& handle) {
  // Start at the handle's last computed token, or one before the end when all
  // were computed (a prefill): the step then yields the next-token logits.
  const int32_t len = static_cast<int32_t>(handle.tokens.size());
  const int32_t start = std::min(handle.num_computed, len - 1);
  const int32_t shared = start / block_size_;
  for (int32_t i = 0; i < shared; ++i) {
    allocator_.AddRef(handle.blocks[i]);
    seq.blocks.push_back(handle.blocks[i]);
  }
  if (start % block_size_ != 0) {
    // Copy-on-write of the partly filled block this sequence writes into
    // next. The copy's block is allocated when the sequence is scheduled
    // (Grow, after the scheduler made room); until then the source is kept alive.
    allocator_.AddRef(handle.blocks[shared]);
    seq.cow_src = handle.blocks[shared];
  }
  seq.num_computed = start;
  seq.result.cached_tokens = start;
  return absl::OkStatus();
}

void Engine::LookupPrefix(Sequence& seq) {
  // The next block is a copy of a handle's partly filled one: nothing to look up.
  if (seq.cow_src >= 0) return;
  const int32_t before = seq.num_computed;
  // Hashes of the blocks it holds already (shared from a handle): the
  // lookup goes on after them, so a handle plus a shared suffix hits too.
  uint64_t h = seq.hashes.empty() ? 0 : seq.hashes.back();
  for (size_t i = seq.hashes.size(); i < seq.blocks.size(); ++i) {
    h = PrefixHash(h, seq.tokens.data() + i * block_size_, block_size_);
    seq.hashes.push_back(h);
  }
  // At least the last token must be computed (its logits are needed).
  const int32_t max_blocks = (static_cast<int32_t>(seq.tokens.size()) - 1) / block_size_;
  for (int32_t i = static_cast<int32_t>(seq.blocks.size()); i < max_blocks; ++i) {
    const int32_t* tokens = seq.tokens.data() + i * block_size_;
    h = PrefixHash(h, tokens, block_size_);
    const int32_t block = allocator_.Lookup(h, i == 0 ? -1 : seq.blocks[i - 1], tokens, block_size_);
    if (block < 0) break;
    seq.blocks.push_back(block);
    seq.hashes.push_back(h);
  }
  seq.num_computed = std::max(seq.num_computed, static_cast<int32_t>(seq.blocks.size()) * block_size_);
  if (options_.metrics && !seq.prefix_counted) {
    seq.prefix_counted = true;  // once per request: not again after a preemption or a failed allocation
    options_.metrics->prefix_cache_queries->Add(static_cast<double>(seq.tokens.size() - before));
    options_.metrics->prefix_cache_hits->Add(seq.num_computed - before);
  }
  // Reused tokens: the handle's (counted by Attach) and the cache's.
  seq.result.cached_tokens = std::max(seq.result.cached_tokens, seq.num_computed);
}

void Engine::PublishBlocks(Sequence& seq) {
  // Only what applied steps wrote: a step in flight is `ahead`.
  const int32_t written = std::min(seq.num_computed - seq.ahead, static_cast<int32_t>(seq.tokens.size()));
  const int32_t full = std::min<int32_t>(written / block_size_, static_cast<int32_t>(seq.blocks.size()));
  for (int32_t i = static_cast<int32_t>(seq.hashes.size()); i < full; ++i) {
    const uint64_t parent = i == 0 ? 0 : seq.hashes[i - 1];
    const int32_t* tokens = seq.tokens.data() + i * block_size_;
    seq.hashes.push_back(PrefixHash(parent, tokens, block_size_));
    allocator_.Publish(seq.blocks[i], seq.hashes.back(), i == 0 ? -1 : seq.blocks[i - 1], tokens,
                       block_size_);
  }
}

void Engine::ExpireHandles() {
  const int64_t now = NowMs();
  bool expired = false;
  for (auto it = handles_.begin(); it != handles_.end();) {
    if (it->second.expiry_ms > now) {
      ++it;
      continue;
    }
    allocator_.Release(it->second.blocks);
    it = handles_.erase(it);
    expired = true;
  }
  if (expired) UpdateGauges();
}

absl::Status Engine::HandleNotFound(const std::string& what, const std::string& handle) const {
  // Untrusted input: echo a bounded prefix only.
  const std::string shown =
      handle.size() <= 40 ? handle : absl::StrCat(handle.substr(0, 32), "... (", handle.size(), " bytes)");
  auto lost = lost_handles_.find(handle);
  if (lost != lost_handles_.end()) {
    return absl::NotFoundError(
        absl::StrCat(what, " '", shown, "' was lost: ", lost->second, "; prefill its tokens again"));
  }
  return absl::NotFoundError(absl::StrCat(what, " '", shown, "' is unknown, released or expired"));
}

absl::Status Engine::CheckHandle(const std::string& handle, const std::string& owner) const {
  auto it = handles_.find(handle);
  if (it == handles_.end() || it->second.owner != owner || it->second.expiry_ms <= NowMs()) {
    return HandleNotFound("handle", handle);
  }
  return absl::OkStatus();
}

absl::Status Engine::ReleaseHandle(const std::string& handle, const std::string& owner) {
  auto it = handles_.find(handle);
  if (it == handles_.end() || it->second.owner != owner) return HandleNotFound("handle", handle);
  const bool expired = it->second.expiry_ms <= NowMs();
  allocator_.Release(it->second.blocks);
  handles_.erase(it);
  UpdateGauges();
  if (expired) return HandleNotFound("handle", handle);
  return absl::OkStatus();
}

Engine::Stats Engine::stats() const {
  Stats s;
  s.num_blocks = allocator_.num_blocks();
  s.free_blocks = allocator_.num_available();
  s.cached_blocks = allocator_.num_cached();
  s.referenced_blocks = allocator_.num_referenced();
  s.running = static_cast<int32_t>(scheduler_.running().size());
  s.waiting = static_cast<int32_t>(scheduler_.waiting().size());
  s.handles = static_cast<int32_t>(handles_.size());
  s.prefix_cache_hits = allocator_.cache_hits();
  return s;
}

}  // namespace shardlm
