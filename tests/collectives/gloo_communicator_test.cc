// Each collective of the Gloo backend against its plain single-process
// result, for world sizes 1-4, f32 and bf16, with shapes that do not divide
// evenly where the operation allows it. Ranks are threads sharing a HashStore;
// the transport is real TCP over loopback.
#include "collectives/gloo_communicator.h"

#include <ATen/ATen.h>
#include <gloo/rendezvous/hash_store.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "tests/testing/status_matchers.h"

namespace shardlm {
namespace {

using ::shardlm::testing::IsOk;
using ::shardlm::testing::StatusIs;
using ::testing::HasSubstr;

// Runs body(rank, comm) on `world` threads, each with its own communicator.
void RunRanks(int world, const std::function<void(int, Communicator&)>& body,
              std::chrono::milliseconds timeout = std::chrono::seconds(10), bool barrier_at_end = true) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      GlooOptions o;
      o.timeout = timeout;
      auto comm = MakeGlooCommunicator({r, world}, store, o);
      ASSERT_THAT(comm, IsOk());
      body(r, **comm);
      // Gloo's ring algorithms end by sending a notification they do not
      // wait for; a rank that tore down its connections at once could cut a
      // slower peer's last receive. Real workers keep their communicator.
      if (barrier_at_end) {
        EXPECT_THAT((*comm)->Barrier(), IsOk());
      }
    });
  }
  for (auto& t : threads) t.join();
}

// The tensor rank r contributes: distinct values per rank and element.
at::Tensor Input(int rank, std::vector<int64_t> shape, at::ScalarType dtype) {
  at::Tensor t =
      at::arange(at::IntArrayRef(shape).vec().empty() ? 1 : c10::multiply_integers(shape), at::kFloat)
          .reshape(shape);
  return (t * 0.25 + rank * 100.0 - 3.0).to(dtype);
}

struct Param {
  int world;
  at::ScalarType dtype;
};

class GlooTest : public ::testing::TestWithParam<Param> {};

TEST_P(GlooTest, AllGatherConcatenatesAlongAnyDim) {
  const auto [world, dtype] = GetParam();
  RunRanks(world, [&, world = world, dtype = dtype](int rank, Communicator& comm) {
    for (int64_t dim : {0, 1}) {
      at::Tensor shard = Input(rank, {3, 5}, dtype);  // odd sizes: nothing needs to divide
      auto out = comm.AllGather(shard, dim);
      ASSERT_THAT(out, IsOk());
      std::vector<at::Tensor> parts;
      for (int r = 0; r < world; ++r) parts.push_back(Input(r, {3, 5}, dtype));
      EXPECT_TRUE(out->equal(at::cat(parts, dim))) << "dim " << dim << " rank " << rank;
    }
  });
}

TEST_P(GlooTest, ReduceScatterGivesEachRankItsSliceOfTheSum) {
  const auto [world, dtype] = GetParam();
  RunRanks(world, [&, world = world, dtype = dtype](int rank, Communicator& comm) {
    const int64_t cols = 4 * world;
    at::Tensor sum = at::zeros({3, cols}, at::kFloat);
    for (int r = 0; r < world; ++r) sum += Input(r, {3, cols}, dtype).to(at::kFloat);
    auto out = comm.ReduceScatter(Input(rank, {3, cols}, dtype), 1);
    ASSERT_THAT(out, IsOk());
    EXPECT_EQ(out->scalar_type(), dtype);
    at::Tensor expect = sum.narrow(1, rank * 4, 4).to(dtype);
    EXPECT_TRUE(at::allclose(out->to(at::kFloat), expect.to(at::kFloat), 1e-2, 1e-5)) << "rank " << rank;
  });
}

TEST_P(GlooTest, AllReduceAndBroadcastOnOddSizes) {
  const auto [world, dtype] = GetParam();
  RunRanks(world, [&, world = world, dtype = dtype](int rank, Communicator& comm) {
    at::Tensor t = Input(rank, {7}, dtype);
    ASSERT_THAT(comm.AllReduce(t), IsOk());
    at::Tensor sum = at::zeros({7}, at::kFloat);
    for (int r = 0; r < world; ++r) sum += Input(r, {7}, dtype).to(at::kFloat);
    EXPECT_TRUE(at::allclose(t.to(at::kFloat), sum.to(dtype).to(at::kFloat), 1e-2, 1e-5));
    const int root = world - 1;
    at::Tensor b = Input(rank, {5, 3}, dtype);
    ASSERT_THAT(comm.Broadcast(b, root), IsOk());
    EXPECT_TRUE(b.equal(Input(root, {5, 3}, dtype)));
    EXPECT_THAT(comm.Barrier(), IsOk());
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooTest,
                         ::testing::Values(Param{1, at::kFloat}, Param{2, at::kFloat}, Param{3, at::kFloat},
                                           Param{4, at::kFloat}, Param{2, at::kBFloat16},
                                           Param{3, at::kBFloat16}),
                         [](const auto& info) {
                           return "world" + std::to_string(info.param.world) +
                                  (info.param.dtype == at::kFloat ? "_f32" : "_bf16");
                         });

TEST(GlooFailureTest, AStoppedPeerTimesOutInsteadOfHanging) {
  auto start = std::chrono::steady_clock::now();
  RunRanks(
      2,
      [&](int rank, Communicator& comm) {
        if (rank == 1) {  // alive, connected, but never joins the all-reduce
          std::this_thread::sleep_for(std::chrono::seconds(3));
          return;
        }
        at::Tensor t = at::ones({4});
        EXPECT_THAT(comm.AllReduce(t),
                    StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("rank 0 of 2")));
        // Broken for good, and says so.
        EXPECT_THAT(comm.Barrier(), StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("all-reduce")));
      },
      std::chrono::milliseconds(1000), /*barrier_at_end=*/false);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(8));
}

TEST(GlooFailureTest, ADeadPeerIsUnavailable) {
  RunRanks(
      2,
      [&](int rank, Communicator& comm) {
        if (rank == 1) return;  // its communicator is destroyed: connections close
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        at::Tensor t = at::ones({4});
        EXPECT_THAT(comm.AllReduce(t), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 0 of 2")));
      },
      std::chrono::seconds(10), /*barrier_at_end=*/false);
}

// The cause of a flaky group formation: a rank that tore its communicator
// down right after creating it (as a worker whose shard fails to load does)
// could make a slower peer's creation fail with "Connection closed by peer".
// Every rank's creation must succeed however fast the others leave; many
// rounds, with some ranks leaving at once, make the old race show.
TEST(GlooFailureTest, CreationSucceedsWhenPeersLeaveAtOnce) {
  constexpr int kRounds = 30;
  for (int round = 0; round < kRounds; ++round) {
    const int world = 2 + round % 3;
    auto store = std::make_shared<gloo::rendezvous::HashStore>();
    std::vector<absl::Status> created(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        GlooOptions o;
        o.prefix = "round" + std::to_string(round);
        // Odd ranks leave at once; even ranks are slow to connect.
        if (r % 2 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(r * 2));
        auto comm = MakeGlooCommunicator({r, world}, store, o);
        created[r] = comm.status();
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r) {
      ASSERT_THAT(created[r], IsOk()) << "round " << round << ", rank " << r << " of " << world;
    }
  }
}

}  // namespace
}  // namespace shardlm
