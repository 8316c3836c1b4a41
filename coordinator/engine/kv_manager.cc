#include "coordinator/engine/kv_manager.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/random_token.h"
#include "coordinator/engine/service_metrics.h"

namespace shardlm {

KvManager::KvManager(int32_t num_blocks, Options options) : options_(options), allocator_(num_blocks) {
  if (options_.record_events) allocator_.set_event_log(&events_);
}

int64_t KvManager::NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// --- The scheduler's view -------------------------------------------------

// The scheduler works on SchedSeq; every sequence it holds is the engine's.
Sequence& KvManager::Of(SchedSeq& s) { return static_cast<Sequence&>(s); }
const Sequence& KvManager::Of(const SchedSeq& s) { return static_cast<const Sequence&>(s); }

void KvManager::Admit(SchedSeq& s) {
  Sequence& seq = Of(s);
  // Scoring needs logits at every prompt position, so it computes them all.
  // Once per admission: after its first step the sequence publishes instead.
  if (options_.prefix_caching && !seq.request.score_prompt && !seq.kv.started &&
      seq.num_computed == static_cast<int32_t>(seq.kv.blocks.size()) * options_.block_size) {
    LookupPrefix(seq);
  }
}

int32_t KvManager::BlocksShort(const SchedSeq& s, int32_t tokens) const {
  const Sequence& seq = Of(s);
  return std::max(0, BlocksFor(tokens, options_.block_size) - static_cast<int32_t>(seq.kv.blocks.size()));
}

void KvManager::Grow(SchedSeq& s, int32_t tokens) {
  Sequence& seq = Of(s);
  const int32_t need = BlocksShort(seq, tokens);
  if (need <= 0) return;
  auto ids = allocator_.Allocate(need);
  CHECK(ids.ok()) << ids.status();
  if (seq.kv.cow_src >= 0) {
    seq.kv.copies.emplace_back(seq.kv.cow_src, (*ids)[0]);  // its reference is dropped once copied
    seq.kv.cow_src = -1;
  }
  seq.kv.blocks.insert(seq.kv.blocks.end(), ids->begin(), ids->end());
}

void KvManager::Evict(SchedSeq& s) {
  Sequence& seq = Of(s);
  seq.kv.started = false;
  allocator_.Release(seq.kv.blocks);
  seq.kv.blocks.clear();
  seq.kv.hashes.clear();
  ReleaseCopies(seq);
  seq.num_computed = 0;  // recomputed from its tokens when it runs again
}

KvManager::StepHold KvManager::EnterStep(Sequence& seq) {
  StepHold hold{!seq.kv.started, std::move(seq.kv.copies)};
  seq.kv.started = true;
  seq.kv.copies.clear();
  return hold;
}

void KvManager::ReleaseCopies(Sequence& seq) {
  for (const auto& [src, dst] : seq.kv.copies) allocator_.Release(src);
  seq.kv.copies.clear();
  if (seq.kv.cow_src >= 0) allocator_.Release(seq.kv.cow_src);
  seq.kv.cow_src = -1;
}

void KvManager::ReleaseCopied(const std::vector<std::pair<int32_t, int32_t>>& copies) {
  for (const auto& [src, dst] : copies) allocator_.Release(src);
}

absl::Status KvManager::TooSmall(int64_t tokens) const {
  return absl::ResourceExhaustedError(
      absl::StrCat("KV cache too small for the request: it needs ", BlocksFor(tokens, options_.block_size),
                   " blocks of ", options_.block_size, " tokens, ", allocator_.num_available(), " of ",
                   allocator_.num_blocks(), " are free and ", HandleBlockSet().size(),
                   " are held by ChunkResult handles (release unused handles)"));
}

// --- Prefix caching ---------------------------------------------------------

void KvManager::LookupPrefix(Sequence& seq) {
  // The next block is a copy of a handle's partly filled one: nothing to look up.
  if (seq.kv.cow_src >= 0) return;
  const int32_t bs = options_.block_size;
  const int32_t before = seq.num_computed;
  // Hashes of the blocks it holds already (shared from a handle): the
  // lookup goes on after them, so a handle plus a shared suffix hits too.
  uint64_t h = seq.kv.hashes.empty() ? 0 : seq.kv.hashes.back();
  for (size_t i = seq.kv.hashes.size(); i < seq.kv.blocks.size(); ++i) {
    h = PrefixHash(h, seq.tokens.data() + i * bs, bs);
    seq.kv.hashes.push_back(h);
  }
  // At least the last token must be computed (its logits are needed).
  const int32_t max_blocks = (static_cast<int32_t>(seq.tokens.size()) - 1) / bs;
  for (int32_t i = static_cast<int32_t>(seq.kv.blocks.size()); i < max_blocks; ++i) {
    const int32_t* tokens = seq.tokens.data() + i * bs;
    h = PrefixHash(h, tokens, bs);
    const int32_t block = allocator_.Lookup(h, i == 0 ? -1 : seq.kv.blocks[i - 1], tokens, bs);
    if (block < 0) break;
    seq.kv.blocks.push_back(block);
    seq.kv.hashes.push_back(h);
  }
  seq.num_computed = std::max(seq.num_computed, static_cast<int32_t>(seq.kv.blocks.size()) * bs);
  if (options_.metrics && !seq.kv.prefix_counted) {
    seq.kv.prefix_counted = true;  // once per request: not again after a preemption or a failed allocation
    options_.metrics->prefix_cache_queries->Add(static_cast<double>(seq.tokens.size() - before));
    options_.metrics->prefix_cache_hits->Add(seq.num_computed - before);
  }
  // Reused tokens: the handle's (counted by Attach) and the cache's.
  seq.kv.cached_tokens = std::max(seq.kv.cached_tokens, seq.num_computed);
}

void KvManager::Publish(Sequence& seq) {
  if (!options_.prefix_caching) return;
  const int32_t bs = options_.block_size;
  // Only what applied steps wrote: a step in flight is `ahead`.
  const int32_t written =
      std::min(seq.num_computed - seq.flight.ahead, static_cast<int32_t>(seq.tokens.size()));
  const int32_t full = std::min<int32_t>(written / bs, static_cast<int32_t>(seq.kv.blocks.size()));
  for (int32_t i = static_cast<int32_t>(seq.kv.hashes.size()); i < full; ++i) {
    const uint64_t parent = i == 0 ? 0 : seq.kv.hashes[i - 1];
    const int32_t* tokens = seq.tokens.data() + i * bs;
    seq.kv.hashes.push_back(PrefixHash(parent, tokens, bs));
    const bool published = allocator_.Publish(seq.kv.blocks[i], seq.kv.hashes.back(),
                                              i == 0 ? -1 : seq.kv.blocks[i - 1], tokens, bs);
    if (published && options_.record_events) {
      events_.Stored(seq.kv.hashes.back(), i == 0 ? std::nullopt : std::optional<uint64_t>(parent), tokens,
                     bs);
    }
  }
}

void KvManager::Shrink(Sequence& seq) {
  const int32_t keep =
      static_cast<int32_t>(BlocksFor(static_cast<int64_t>(seq.tokens.size()), options_.block_size));
  if (static_cast<int32_t>(seq.kv.blocks.size()) <= keep) return;
  allocator_.Release(std::vector<int32_t>(seq.kv.blocks.begin() + keep, seq.kv.blocks.end()));
  seq.kv.blocks.resize(keep);  // never published: Publish stops at the tokens
}

// --- Handles ----------------------------------------------------------------

const KvManager::Handle* KvManager::Find(const std::string& handle, const std::string& owner) const {
  auto it = handles_.find(handle);
  if (it == handles_.end() || it->second.owner != owner || it->second.expiry_ms <= NowMs()) return nullptr;
  return &it->second;
}

absl::Status KvManager::HandleNotFound(const std::string& what, const std::string& handle) const {
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

absl::StatusOr<int64_t> KvManager::HandleLength(const std::string& handle, const std::string& owner,
                                                const std::string& what) const {
  const Handle* h = Find(handle, owner);
  if (h == nullptr) return HandleNotFound(what, handle);
  return static_cast<int64_t>(h->tokens.size());
}

absl::Status KvManager::CheckHandle(const std::string& handle, const std::string& owner) const {
  return Find(handle, owner) == nullptr ? HandleNotFound("handle", handle) : absl::OkStatus();
}

std::unordered_set<int32_t> KvManager::HandleBlockSet() const {
  std::unordered_set<int32_t> blocks;
  for (const auto& [id, h] : handles_) blocks.insert(h.blocks.begin(), h.blocks.end());
  return blocks;
}

int64_t KvManager::ShareCap() const {
  return static_cast<int64_t>(options_.max_handle_share * allocator_.num_blocks());
}

absl::Status KvManager::OverShareCap(const std::string& holding) const {
  return absl::ResourceExhaustedError(absl::StrCat(
      holding, ", over the limit of ", ShareCap(), " (--max-handle-share ", options_.max_handle_share, " of ",
      allocator_.num_blocks(), " blocks); release handles you no longer need"));
}

absl::Status KvManager::CheckShare(const EngineRequest& request) const {
  if (!request.keep_handle || request.transient_handle || request.keep_handle_if_room)
    return absl::OkStatus();
  // Kept handles may pin only a share of the cache, so that they cannot
  // starve the requests that run.
  const int32_t bs = options_.block_size;
  int64_t prefix_len = 0;
  if (!request.prefix_handle.empty()) {
    prefix_len = static_cast<int64_t>(handles_.at(request.prefix_handle).tokens.size());
    if (request.prefix_length > 0) prefix_len = std::min<int64_t>(prefix_len, request.prefix_length);
  }
  const int64_t total = prefix_len + static_cast<int64_t>(request.prompt.size()) + request.max_new_tokens;
  const int64_t adds = BlocksFor(total, bs) - prefix_len / bs;  // full blocks are shared
  const int64_t held = static_cast<int64_t>(HandleBlockSet().size());
  if (held + adds > ShareCap()) {
    return OverShareCap(absl::StrCat("kept ChunkResult handles hold ", held,
                                     " KV blocks and this one would add up to ", adds));
  }
  return absl::OkStatus();
}

std::vector<int32_t> KvManager::Attach(Sequence& seq, const std::string& id, int32_t length) {
  const Handle& handle = handles_.at(id);
  const int32_t bs = options_.block_size;
  // Start at the handle's last computed token, or one before the end when all
  // were computed (a prefill): the step then yields the next-token logits.
  const int32_t all = static_cast<int32_t>(handle.tokens.size());
  const int32_t len = length > 0 ? std::min(length, all) : all;
  const int32_t start = std::min(handle.num_computed, len - 1);
  const int32_t shared = start / bs;
  for (int32_t i = 0; i < shared; ++i) {
    allocator_.AddRef(handle.blocks[i]);
    seq.kv.blocks.push_back(handle.blocks[i]);
  }
  if (start % bs != 0) {
    // Copy-on-write of the partly filled block this sequence writes into
    // next. The copy's block is allocated when the sequence is scheduled
    // (Grow, after the scheduler made room); until then the source is kept alive.
    allocator_.AddRef(handle.blocks[shared]);
    seq.kv.cow_src = handle.blocks[shared];
  }
  seq.num_computed = start;
  seq.kv.cached_tokens = start;
  return std::vector<int32_t>(handle.tokens.begin(), handle.tokens.begin() + len);
}

absl::Status KvManager::Retire(Sequence& seq, absl::Status status) {
  ReleaseCopies(seq);
  // A step run behind the last token (overlapped steps) may have added a
  // block past the tokens: a handle holds only the tokens' blocks.
  const size_t needed =
      static_cast<size_t>(BlocksFor(static_cast<int64_t>(seq.tokens.size()), options_.block_size));
  if (seq.kv.blocks.size() > needed) {
    allocator_.Release(std::vector<int32_t>(seq.kv.blocks.begin() + needed, seq.kv.blocks.end()));
    seq.kv.blocks.resize(needed);
  }
  if (status.ok() && seq.request.keep_handle && !seq.request.transient_handle) {
    // CheckShare passed at submission; concurrent keeps may have used it up since.
    std::unordered_set<int32_t> held = HandleBlockSet();
    const size_t before = held.size();
    held.insert(seq.kv.blocks.begin(), seq.kv.blocks.end());
    // Handles kept only if there is room (a conversation's between its turns) may fill half the
    // share: the other half stays for the handles clients ask for.
    if (seq.request.keep_handle_if_room && static_cast<int64_t>(held.size()) > ShareCap() / 2) {
      allocator_.Release(seq.kv.blocks);  // no room: freed, and the request still succeeds
      seq.kv.blocks.clear();
      return status;
    }
    if (static_cast<int64_t>(held.size()) > ShareCap()) {
      status = OverShareCap(absl::StrCat("kept ChunkResult handles would hold ", held.size(), " KV blocks (",
                                         before, " before this one)"));
    }
  }
  if (status.ok() && seq.request.keep_handle) {
    Keep(seq);
  } else {
    allocator_.Release(seq.kv.blocks);
  }
  seq.kv.blocks.clear();
  return status;
}

void KvManager::Keep(Sequence& seq) {
  Handle h;
  h.owner = seq.request.owner;
  h.tokens = seq.tokens;
  // A step that ran behind the last token (overlapped steps) computed a
  // position past it: only the tokens' positions count.
  h.num_computed = std::min(seq.num_computed, static_cast<int32_t>(seq.tokens.size()));
  h.blocks = std::move(seq.kv.blocks);
  h.expiry_ms = NowMs() + options_.handle_ttl_ms;
  // 128 bits from the OS's CSPRNG: a handle cannot be guessed from others.
  const std::string id = RandomToken(16);
  seq.kv.kept_handle = id;
  seq.kv.kept_expiry_ms = h.expiry_ms;
  handles_[id] = std::move(h);
}

bool KvManager::ExpireHandles() {
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
  return expired;
}

absl::Status KvManager::ReleaseHandle(const std::string& handle, const std::string& owner) {
  auto it = handles_.find(handle);
  if (it == handles_.end() || it->second.owner != owner) return HandleNotFound("handle", handle);
  const bool expired = it->second.expiry_ms <= NowMs();
  allocator_.Release(it->second.blocks);
  handles_.erase(it);
  if (expired) return HandleNotFound("handle", handle);
  return absl::OkStatus();
}

void KvManager::Reset(int32_t num_blocks, const std::string& why) {
  constexpr size_t kMaxLostHandles = 100000;
  for (auto& [id, handle] : handles_) {
    lost_handles_[id] = why;
    lost_order_.push_back(id);
  }
  while (lost_order_.size() > kMaxLostHandles) {
    lost_handles_.erase(lost_order_.front());
    lost_order_.pop_front();
  }
  handles_.clear();
  allocator_ = BlockAllocator(num_blocks);
  if (options_.record_events) {
    allocator_.set_event_log(&events_);
    events_.AllCleared();
  }
}

}  // namespace shardlm
