// Collectives over unequal shards (collectives/uneven.h) on real backends, Gloo
// and shared memory, with ranks as threads: 3 ranks with parts {3, 2, 2} along
// dim 1, against what one process computes from every rank's data; and the
// stand-in communicator's shapes.
#include "collectives/uneven.h"

#include <ATen/ATen.h>
#include <gloo/rendezvous/hash_store.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "collectives/gloo_communicator.h"
#include "collectives/shm_communicator.h"
#include "tests/testing/status_matchers.h"

namespace shardlm {
namespace {

using ::shardlm::testing::IsOk;

const std::vector<int64_t> kParts = {3, 2, 2};

void RunRanks(bool shm, const std::function<void(int, Communicator&)>& body) {
  gloo::rendezvous::HashStore store;
  std::vector<std::thread> threads;
  const int world = static_cast<int>(kParts.size());
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      GlooOptions g;
      g.prefix = "uneven";
      auto store_ptr = std::shared_ptr<gloo::rendezvous::Store>(&store, [](auto*) {});
      auto gloo = MakeGlooCommunicator({r, world}, store_ptr, g);
      ASSERT_THAT(gloo, IsOk());
      std::unique_ptr<Communicator> comm = std::move(*gloo);
      if (shm) comm = MaybeUseSharedMemory({r, world}, store, std::move(comm), ShmOptions{"uneven"});
      ASSERT_EQ(IsSharedMemory(*comm), shm);
      body(r, *comm);
      EXPECT_THAT(comm->Barrier(), IsOk());
    });
  }
  for (auto& t : threads) t.join();
}

// Rank r's shard: f32[4, parts[r]] of distinct values.
at::Tensor Shard(int r) { return at::arange(4 * kParts[r], at::kFloat).reshape({4, kParts[r]}) + 100 * r; }
// Rank r's partial sums: f32[4, 7].
at::Tensor Partial(int r) { return at::arange(28, at::kFloat).reshape({4, 7}) * (r + 1); }

class UnevenTest : public ::testing::TestWithParam<bool> {};

TEST_P(UnevenTest, AllGatherGatherAndReduceScatterCarryUnequalParts) {
  const at::Tensor whole = at::cat({Shard(0), Shard(1), Shard(2)}, 1);
  const at::Tensor sum = Partial(0) + Partial(1) + Partial(2);
  RunRanks(GetParam(), [&](int r, Communicator& comm) {
    auto gathered = AllGatherParts(comm, Shard(r), 1, kParts);
    ASSERT_THAT(gathered, IsOk());
    EXPECT_TRUE(gathered->equal(whole)) << "rank " << r;
    auto at_root = GatherParts(comm, Shard(r), 1, /*root=*/0, kParts);
    ASSERT_THAT(at_root, IsOk());
    if (r == 0) {
      EXPECT_TRUE(at_root->equal(whole));
    } else {
      EXPECT_FALSE(at_root->defined());
    }
    auto mine = ReduceScatterParts(comm, Partial(r), 1, kParts);
    ASSERT_THAT(mine, IsOk());
    const int64_t start = r == 0 ? 0 : (r == 1 ? 3 : 5);
    EXPECT_TRUE(mine->equal(sum.narrow(1, start, kParts[r]))) << "rank " << r;
  });
}

INSTANTIATE_TEST_SUITE_P(Backends, UnevenTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "SharedMemory" : "Gloo"; });

TEST(UnevenStandInTest, ShapesAreTheGroupsAndPartsMustMatchTheWorld) {
  auto comm = MakeStandInCommunicator({1, 3});
  auto gathered = AllGatherParts(*comm, Shard(1), 1, kParts);
  ASSERT_THAT(gathered, IsOk());
  EXPECT_EQ(gathered->size(1), 7);
  auto mine = ReduceScatterParts(*comm, Partial(1), 1, kParts);
  ASSERT_THAT(mine, IsOk());
  EXPECT_EQ(mine->size(1), 2);
  EXPECT_FALSE(AllGatherParts(*comm, Shard(1), 1, {3, 4}).ok());
}

}  // namespace
}  // namespace shardlm
