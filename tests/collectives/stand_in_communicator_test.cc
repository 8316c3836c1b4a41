// MakeStandInCommunicator: a rank's collectives with no peers, in the
// group's shapes (what the warm-up at load runs on).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "collectives/communicator.h"

namespace shardlm {
namespace {

TEST(StandInCommunicatorTest, GivesTheGroupsShapesFromOneRank) {
  auto comm = MakeStandInCommunicator(RankInfo{2, 4});
  EXPECT_EQ(comm->rank_info().rank, 2);
  EXPECT_EQ(comm->rank_info().world_size, 4);
  const at::Tensor shard = at::arange(6, at::kFloat).view({2, 3});

  auto gathered = comm->AllGather(shard, 1);
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  ASSERT_EQ(gathered->sizes(), (std::vector<int64_t>{2, 12}));
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(at::equal(gathered->narrow(1, 3 * r, 3), shard));

  auto to_root = comm->Gather(shard, 0, /*root=*/0);  // not the root: nothing
  ASSERT_TRUE(to_root.ok());
  EXPECT_FALSE(to_root->defined());
  auto at_root = MakeStandInCommunicator(RankInfo{0, 4})->Gather(shard, 0, /*root=*/0);
  ASSERT_TRUE(at_root.ok());
  EXPECT_EQ(at_root->sizes(), (std::vector<int64_t>{8, 3}));

  const at::Tensor partial = at::arange(16, at::kFloat).view({2, 8});
  auto mine = comm->ReduceScatter(partial, 1);
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_TRUE(mine->is_contiguous());
  EXPECT_TRUE(at::equal(*mine, partial.narrow(1, 4, 2)));
  EXPECT_EQ(comm->ReduceScatter(shard, 1).status().code(), absl::StatusCode::kInvalidArgument);

  at::Tensor t = shard.clone();
  EXPECT_TRUE(comm->AllReduce(t).ok());
  EXPECT_TRUE(comm->Broadcast(t, 0).ok());
  EXPECT_TRUE(comm->Barrier().ok());
  EXPECT_TRUE(at::equal(t, shard));
}

}  // namespace
}  // namespace shardlm
