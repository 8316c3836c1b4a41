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

TEST(BlockAllocatorDeathTest, DoubleReleaseIsAProgrammerError) {
  BlockAllocator a(2);
  auto x = a.Allocate(1);
  a.Release((*x)[0]);
  EXPECT_DEATH(a.Release((*x)[0]), "double release");
}

}  // namespace
}  // namespace shardlm
