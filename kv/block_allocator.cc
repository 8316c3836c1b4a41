#include "kv/block_allocator.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace shardlm {

BlockAllocator::BlockAllocator(int32_t num_blocks) : ref_counts_(num_blocks, 0) {
  free_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

absl::StatusOr<std::vector<int32_t>> BlockAllocator::Allocate(int32_t n) {
  if (n < 0 || n > num_free()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV cache: ", n, " blocks requested, ", num_free(), " of ", num_blocks(), " free"));
  }
  std::vector<int32_t> ids(free_.end() - n, free_.end());
  free_.resize(free_.size() - n);
  for (int32_t b : ids) ref_counts_[b] = 1;
  return ids;
}

void BlockAllocator::AddRef(int32_t block) {
  CHECK_GT(ref_counts_.at(block), 0) << "AddRef on free block " << block;
  ++ref_counts_[block];
}

void BlockAllocator::Release(int32_t block) {
  CHECK_GT(ref_counts_.at(block), 0) << "double release of block " << block;
  if (--ref_counts_[block] == 0) free_.push_back(block);
}

void BlockAllocator::Release(const std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) Release(b);
}

}  // namespace shardlm
