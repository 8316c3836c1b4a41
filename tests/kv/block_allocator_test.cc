#include "kv/block_allocator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "tests/testing/status_matchers.h"

namespace shardlm {
namespace {

using ::shardlm::testing::StatusIs;
using ::testing::HasSubstr;

TEST(BlockAllocatorTest, AllocatesDistinctBlocksAndFreesOnLastRelease) {
  BlockAllocator a(8);
  auto x = a.Allocate(5);
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(std::set<int32_t>(x->begin(), x->end()).size(), 5u);
  EXPECT_EQ(a.num_free(), 3);
  a.AddRef((*x)[0]);
  a.Release(*x);
  EXPECT_EQ(a.num_free(), 7) << "the shared block stays held";
  EXPECT_EQ(a.ref_count((*x)[0]), 1);
  a.Release((*x)[0]);
  EXPECT_EQ(a.num_free(), 8);
}

TEST(BlockAllocatorTest, ExhaustionAllocatesNothingAndSaysWhatIsFree) {
  BlockAllocator a(4);
  ASSERT_TRUE(a.Allocate(3).ok());
  EXPECT_THAT(a.Allocate(2),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("2 blocks requested, 1 of 4 free")));
  EXPECT_EQ(a.num_free(), 1);
}

TEST(BlockAllocatorTest, BlocksFor) {
  EXPECT_EQ(BlocksFor(0, 16), 0);
  EXPECT_EQ(BlocksFor(1, 16), 1);
  EXPECT_EQ(BlocksFor(16, 16), 1);
  EXPECT_EQ(BlocksFor(17, 16), 2);
}

TEST(BlockAllocatorTest, PrefixCacheKeepsReleasedBlocksAndEvictsOnlyWhenNeeded) {
  BlockAllocator alloc(2);
  const int32_t t0[2] = {5, 6};
  const int32_t t1[2] = {7, 8};
  auto ids = alloc.Allocate(2);
  ASSERT_TRUE(ids.ok());
  const uint64_t h0 = PrefixHash(0, t0, 2);
  const uint64_t h1 = PrefixHash(h0, t1, 2);
  alloc.Publish((*ids)[0], h0, -1, t0, 2);
  alloc.Publish((*ids)[1], h1, (*ids)[0], t1, 2);
  alloc.Release(*ids);
  EXPECT_EQ(alloc.num_cached(), 2);
  const int32_t b0 = alloc.Lookup(h0, -1, t0, 2);
  EXPECT_EQ(b0, (*ids)[0]);
  EXPECT_EQ(alloc.Lookup(h1, b0, t1, 2), (*ids)[1]);
  EXPECT_EQ(alloc.cache_hits(), 2);
  alloc.Release({b0, (*ids)[1]});
}

// A 64-bit hash can collide, and PrefixHash is not cryptographic, so a
// crafted prompt could match another's hash: the tokens and the chain must
// match too, or it is a miss.
TEST(BlockAllocatorTest, AHashMatchWithOtherTokensOrAnotherParentIsAMiss) {
  BlockAllocator alloc(4);
  const int32_t mine[2] = {1, 2};
  const int32_t theirs[2] = {3, 4};
  auto ids = alloc.Allocate(2);
  ASSERT_TRUE(ids.ok());
  const int32_t first = (*ids)[0], second = (*ids)[1];
  const uint64_t h = 42;  // pretend both prefixes hash to 42
  alloc.Publish(first, h, -1, mine, 2);
  alloc.Publish(second, 43, first, mine, 2);
  EXPECT_EQ(alloc.Lookup(h, -1, theirs, 2), -1) << "same hash, other tokens";
  EXPECT_EQ(alloc.Lookup(43, -1, mine, 2), -1) << "same tokens, published after another block";
  EXPECT_EQ(alloc.hash_collisions(), 2);
  // Its parent freed and reallocated (new contents): no longer a hit.
  alloc.Release(first);
  auto fresh = alloc.Allocate(2);  // takes the free blocks first: not `first`, which is cached
  ASSERT_TRUE(fresh.ok());
  auto again = alloc.Allocate(1);  // evicts `first`
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[0], first);
  EXPECT_EQ(alloc.Lookup(43, first, mine, 2), -1) << "its parent block was reallocated";
  EXPECT_EQ(alloc.Lookup(h, -1, mine, 2), -1) << "evicted blocks are unpublished";
  EXPECT_EQ(alloc.cache_hits(), 0);
}

TEST(BlockAllocatorDeathTest, DoubleReleaseIsAProgrammerError) {
  BlockAllocator a(2);
  auto x = a.Allocate(1);
  a.Release((*x)[0]);
  EXPECT_DEATH(a.Release((*x)[0]), "double release");
}

}  // namespace
}  // namespace shardlm
