#include "kv/block_allocator.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace shardlm {

BlockAllocator::BlockAllocator(int32_t num_blocks)
    : ref_counts_(num_blocks, 0),
      hash_of_(num_blocks, 0),
      published_(num_blocks, false),
      generation_(num_blocks, 0),
      parent_of_(num_blocks, -1),
      parent_generation_(num_blocks, 0),
      tokens_of_(num_blocks),
      lru_pos_(num_blocks) {
  free_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

absl::StatusOr<std::vector<int32_t>> BlockAllocator::Allocate(int32_t n) {
  if (n < 0 || n > num_available()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV cache: ", n, " blocks requested, ", num_available(), " of ", num_blocks(), " free"));
  }
  // Evict the least recently used cached blocks only as far as needed.
  while (static_cast<int32_t>(free_.size()) < n) {
    const int32_t victim = lru_.front();
    lru_.pop_front();
    if (event_log_ != nullptr) event_log_->Removed(hash_of_[victim]);
    Unpublish(victim);
    free_.push_back(victim);
  }
  std::vector<int32_t> ids(free_.end() - n, free_.end());
  free_.resize(free_.size() - n);
  for (int32_t b : ids) {
    ref_counts_[b] = 1;
    ++generation_[b];  // new contents: blocks published after it no longer follow it
  }
  return ids;
}

void BlockAllocator::AddRef(int32_t block) {
  CHECK(ref_counts_.at(block) > 0) << "AddRef on free block " << block;
  ++ref_counts_[block];
}

void BlockAllocator::Release(int32_t block) {
  CHECK(ref_counts_.at(block) > 0) << "double release of block " << block;
  if (--ref_counts_[block] > 0) return;
  if (published_[block]) {
    lru_pos_[block] = lru_.insert(lru_.end(), block);  // most recently used last
  } else {
    free_.push_back(block);
  }
}

void BlockAllocator::Release(const std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) Release(b);
}

bool BlockAllocator::Publish(int32_t block, uint64_t prefix_hash, int32_t parent, const int32_t* tokens,
                             int32_t count) {
  CHECK(ref_counts_.at(block) > 0) << "publishing free block " << block;
  if (published_[block] || by_hash_.count(prefix_hash)) return false;
  by_hash_[prefix_hash] = block;
  hash_of_[block] = prefix_hash;
  published_[block] = true;
  parent_of_[block] = parent;
  parent_generation_[block] = parent >= 0 ? generation_.at(parent) : 0;
  tokens_of_[block].assign(tokens, tokens + count);
  return true;
}

int32_t BlockAllocator::Lookup(uint64_t prefix_hash, int32_t parent, const int32_t* tokens, int32_t count) {
  auto it = by_hash_.find(prefix_hash);
  if (it == by_hash_.end()) return -1;
  const int32_t block = it->second;
  const std::vector<int32_t>& own = tokens_of_[block];
  const bool same = parent_of_[block] == parent &&
                    (parent < 0 || parent_generation_[block] == generation_.at(parent)) &&
                    own.size() == static_cast<size_t>(count) && std::equal(own.begin(), own.end(), tokens);
  if (!same) {
    ++hash_collisions_;
    return -1;
  }
  if (ref_counts_[block] == 0) lru_.erase(lru_pos_[block]);
  ++ref_counts_[block];
  ++cache_hits_;
  return block;
}

void BlockAllocator::Unpublish(int32_t block) {
  by_hash_.erase(hash_of_[block]);
  published_[block] = false;
  tokens_of_[block].clear();
}

uint64_t PrefixHash(uint64_t parent, const int32_t* tokens, int32_t count) {
  // splitmix64-style mixing of the parent and each token: cheap and well
  // spread; a 64-bit collision among cached blocks is vanishingly unlikely.
  uint64_t h = parent ^ 0x9E3779B97F4A7C15ull;
  for (int32_t i = 0; i < count; ++i) {
    h ^=
        static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])) + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    h ^= h >> 31;
  }
  return h;
}

}  // namespace shardlm
