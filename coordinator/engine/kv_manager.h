// The engine's KV cache bookkeeping (each sequence's KvHold is written here
// alone): the block allocator, automatic prefix
// caching (look up and publish full blocks), copy-on-write of a shared
// partly filled block, and ChunkResult handles (keep, attach, expire,
// release, and the share of the cache they may pin). No tensors: the
// workers hold the blocks, this decides which ids each sequence uses.
// The scheduler sees it as a KvSpace. See docs/chunk_results.md.
//
//   KvManager kv(num_blocks, {.block_size = 16});
//   SHARDLM_RETURN_IF_ERROR(kv.CheckShare(request));
//   if (!request.prefix_handle.empty()) seq.tokens = kv.Attach(seq, request.prefix_handle);
//   for (const Scheduler::Work& w : scheduler.Schedule(kv)) ...  // Admit, Grow, Evict
//   kv.Publish(seq);                                   // after a step wrote its blocks
//   absl::Status kept = kv.Retire(seq, absl::OkStatus());  // freed, or kept as a handle
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/engine/engine_request.h"
#include "coordinator/engine/scheduler.h"
#include "coordinator/engine/sequence.h"
#include "kv/block_allocator.h"
#include "kv/kv_events.h"

namespace shardlm {

class ServiceMetrics;

class KvManager : public KvSpace {
 public:
  KvManager(const KvManager&) = delete;  // its allocator points at its event log
  KvManager& operator=(const KvManager&) = delete;
  struct Options {
    int32_t block_size = 16;
    double max_handle_share = 0.5;   // kept handles may pin at most this share of the blocks
    int64_t handle_ttl_ms = 600000;  // a handle not released expires after this
    bool prefix_caching = true;      // reuse full blocks of identical token prefixes
    bool record_events = false;      // log the prefix cache's changes (TakeEvents)
    ServiceMetrics* metrics = nullptr;
  };

  KvManager(int32_t num_blocks, Options options);

  // KvSpace, for the scheduler (sequences are Sequence).
  void Admit(SchedSeq& seq) override;
  int32_t BlocksShort(const SchedSeq& seq, int32_t tokens) const override;
  int32_t FreeBlocks() const override { return allocator_.num_available(); }
  void Grow(SchedSeq& seq, int32_t tokens) override;
  void Evict(SchedSeq& seq) override;

  // The number of tokens `owner`'s live handle holds; NotFound naming `what`
  // ("prefix handle") when it is unknown, expired, released, lost or another's.
  absl::StatusOr<int64_t> HandleLength(const std::string& handle, const std::string& owner,
                                       const std::string& what) const;
  // ResourceExhausted when keeping `request`'s KV as a handle could pass the
  // share of the cache handles may pin (its prefix handle is live).
  absl::Status CheckShare(const EngineRequest& request) const;
  // Shares the live handle's blocks with `seq` (copying the partly filled
  // last one when the sequence first grows); returns the handle's tokens.
  // With `length` (0: all), only the handle's first `length` tokens.
  std::vector<int32_t> Attach(Sequence& seq, const std::string& handle, int32_t length = 0);
  // What a step needs of `seq`'s hold besides its blocks: whether it starts
  // (its first step since arrival or preemption), and the copy-on-write
  // copies due before it, handed over (ReleaseCopied once the step ran).
  struct StepHold {
    bool starts = false;
    std::vector<std::pair<int32_t, int32_t>> copies;
  };
  StepHold EnterStep(Sequence& seq);
  // Publishes `seq`'s newly written full blocks to the prefix cache (when on).
  void Publish(Sequence& seq);
  // Frees the blocks past those `seq`'s tokens need (rejected proposals'
  // K/V, docs/speculative_decoding.md).
  void Shrink(Sequence& seq);
  // Releases copy-on-write sources once their step ran (copied, or never needed).
  void ReleaseCopied(const std::vector<std::pair<int32_t, int32_t>>& copies);
  // `seq` ends with `status`: its blocks are freed, or, when it asked for a
  // handle and ended well, kept as one (KvHold::kept_handle). Returns
  // `status`, or ResourceExhausted when the handle would pass the share.
  absl::Status Retire(Sequence& seq, absl::Status status);

  // NotFound (as ReleaseHandle would say) unless `owner` holds `handle`.
  absl::Status CheckHandle(const std::string& handle, const std::string& owner) const;
  // Releases a handle's blocks. NotFound if unknown, released, expired or another owner's.
  absl::Status ReleaseHandle(const std::string& handle, const std::string& owner);
  // Releases every handle past its expiry; whether there was one.
  bool ExpireHandles();
  // Starts over on a new pool of `num_blocks`: every handle is dropped, and
  // later uses of one are NotFound saying `why`.
  void Reset(int32_t num_blocks, const std::string& why);

  // The prefix cache's changes since the last call, oldest first (when
  // Options::record_events): blocks published, evicted, all dropped by Reset.
  std::vector<KvEvent> TakeEvents() { return events_.Take(); }

  // ResourceExhausted saying why `tokens` tokens fit nowhere now.
  absl::Status TooSmall(int64_t tokens) const;
  const BlockAllocator& allocator() const { return allocator_; }
  int32_t num_handles() const { return static_cast<int32_t>(handles_.size()); }
  int32_t block_size() const { return options_.block_size; }
  const Options& options() const { return options_; }

 private:
  struct Handle {
    std::string owner;
    std::vector<int32_t> tokens;
    int32_t num_computed = 0;
    std::vector<int32_t> blocks;
    int64_t expiry_ms = 0;
  };

  static Sequence& Of(SchedSeq& s);
  static const Sequence& Of(const SchedSeq& s);
  static int64_t NowMs();
  // The live handle `owner` holds, or null.
  const Handle* Find(const std::string& handle, const std::string& owner) const;
  absl::Status HandleNotFound(const std::string& what, const std::string& handle) const;
  // The blocks held by handles (each once).
  std::unordered_set<int32_t> HandleBlockSet() const;
  int64_t ShareCap() const;
  // RESOURCE_EXHAUSTED: `holding` (what the handles would hold) is past the cap.
  absl::Status OverShareCap(const std::string& holding) const;
  // Takes cached full blocks for `seq`'s leading tokens.
  void LookupPrefix(Sequence& seq);
  // Drops `seq`'s pending copy-on-write sources.
  void ReleaseCopies(Sequence& seq);
  // Keeps `seq`'s blocks as a new handle, named in its result.
  void Keep(Sequence& seq);

  Options options_;
  KvEventLog events_;  // the allocator records evictions into it too
  BlockAllocator allocator_;
  std::map<std::string, Handle> handles_;
  // Handles dropped by Reset, with why (bounded: the oldest are forgotten).
  std::map<std::string, std::string> lost_handles_;
  std::deque<std::string> lost_order_;
};

}  // namespace shardlm
