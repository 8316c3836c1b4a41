// Block ids of the paged KV cache, owned by the coordinator.
//
// Every rank holds a pool with the same number of blocks, so one block id
// names the same page on every rank and one block table serves all ranks.
// Blocks are reference counted so that sequences sharing a prefix share its
// blocks; a block returns to the free list when its count drops to zero.
//
//   BlockAllocator alloc(/*num_blocks=*/1024);
//   SHARDLM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, alloc.Allocate(3));
//   alloc.AddRef(ids[0]);   // shared by a second sequence
//   alloc.Release(ids);     // first owner done
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace shardlm {

class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t num_blocks);

  // ResourceExhausted (naming the request and what is free) when fewer than
  // `n` blocks are free; then nothing is allocated.
  absl::StatusOr<std::vector<int32_t>> Allocate(int32_t n);
  void AddRef(int32_t block);
  void Release(int32_t block);
  void Release(const std::vector<int32_t>& blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t ref_count(int32_t block) const { return ref_counts_.at(block); }

 private:
  std::vector<int32_t> ref_counts_;
  std::vector<int32_t> free_;  // a stack: recently freed blocks are reused first
};

// Number of blocks that hold `tokens` tokens.
inline int32_t BlocksFor(int64_t tokens, int32_t block_size) {
  return static_cast<int32_t>((tokens + block_size - 1) / block_size);
}

}  // namespace shardlm
