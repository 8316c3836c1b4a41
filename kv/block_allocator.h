// Block ids of the paged KV cache, owned by the coordinator, with automatic
// prefix caching.
//
// Every rank holds a pool with the same number of blocks, so one block id
// names the same page on every rank and one block table serves all ranks.
// Blocks are reference counted: sequences, samples and ChunkResult handles
// that share a prefix share its blocks.
//
// Prefix cache: a full block can be published under the hash of the whole
// token prefix it ends (PrefixHash), with its own tokens and the block before
// it. When its last reference goes, a published block is not freed but kept
// as evictable cache, least recently used first; Lookup of the same hash
// takes it back. Allocate evicts the oldest cached blocks only when no free
// block is left.
//
// A hash alone could collide (or be made to), handing one request another's
// KV. So Lookup also compares the block's tokens and requires that it was
// published after the very block the caller holds for the previous position
// (same id, not reallocated since): by induction the whole prefix is equal.
//
//   BlockAllocator alloc(1024);
//   SHARDLM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, alloc.Allocate(3));
//   const uint64_t h0 = PrefixHash(0, block0_tokens, 16);
//   alloc.Publish(ids[0], h0, /*parent=*/-1, block0_tokens, 16);
//   alloc.Release(ids);                                    // ids[0] stays cached
//   int32_t hit = alloc.Lookup(h0, -1, block0_tokens, 16);  // == ids[0], referenced again
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "kv/kv_events.h"

namespace shardlm {

class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t num_blocks);

  // ResourceExhausted (naming the request and what is available) when fewer
  // than `n` blocks are free or evictable; then nothing is allocated.
  absl::StatusOr<std::vector<int32_t>> Allocate(int32_t n);
  void AddRef(int32_t block);
  void Release(int32_t block);
  void Release(const std::vector<int32_t>& blocks);

  // Publishes a full, computed block under the hash of its token prefix,
  // with its `count` tokens and the block before it (-1 for the first). A
  // hash already published keeps its first block; false then.
  bool Publish(int32_t block, uint64_t prefix_hash, int32_t parent, const int32_t* tokens, int32_t count);
  // The block published under `prefix_hash` after `parent` (the caller's
  // block for the previous position, -1 for the first) with these tokens,
  // referenced for the caller; -1 if none (a hash collision is a miss).
  int32_t Lookup(uint64_t prefix_hash, int32_t parent, const int32_t* tokens, int32_t count);

  // Evictions of published blocks are recorded into `log` (null: not recorded).
  void set_event_log(KvEventLog* log) { event_log_ = log; }

  int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  // Blocks an allocation can use: free plus evictable cached ones.
  int32_t num_available() const { return static_cast<int32_t>(free_.size() + lru_.size()); }
  int32_t num_free() const { return num_available(); }
  int32_t num_cached() const { return static_cast<int32_t>(lru_.size()); }
  // Blocks held by at least one sequence or handle.
  int32_t num_referenced() const { return num_blocks() - num_available(); }
  int32_t ref_count(int32_t block) const { return ref_counts_.at(block); }
  int64_t cache_hits() const { return cache_hits_; }
  // Lookups whose hash matched but whose tokens or parent did not.
  int64_t hash_collisions() const { return hash_collisions_; }

 private:
  void Unpublish(int32_t block);

  std::vector<int32_t> ref_counts_;
  std::vector<int32_t> free_;  // a stack: recently freed blocks are reused first
  std::unordered_map<uint64_t, int32_t> by_hash_;
  std::vector<uint64_t> hash_of_;  // per block; valid when published_[b]
  std::vector<bool> published_;
  std::vector<uint64_t> generation_;  // per block: bumped at every allocation
  // Per published block: the block before it, that block's generation then,
  // and its tokens.
  std::vector<int32_t> parent_of_;
  std::vector<uint64_t> parent_generation_;
  std::vector<std::vector<int32_t>> tokens_of_;
  std::list<int32_t> lru_;  // evictable cached blocks, oldest first
  std::vector<std::list<int32_t>::iterator> lru_pos_;
  int64_t cache_hits_ = 0;
  int64_t hash_collisions_ = 0;
  KvEventLog* event_log_ = nullptr;
};

// Hash of a token prefix, chained block by block: the hash of blocks 0..i is
// PrefixHash(hash of blocks 0..i-1, tokens of block i); the first parent is 0.
uint64_t PrefixHash(uint64_t parent, const int32_t* tokens, int32_t count);

// Number of blocks that hold `tokens` tokens.
inline int32_t BlocksFor(int64_t tokens, int32_t block_size) {
  return static_cast<int32_t>((tokens + block_size - 1) / block_size);
}

}  // namespace shardlm
