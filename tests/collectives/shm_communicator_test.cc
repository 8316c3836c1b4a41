// The shared-memory backend against plain single-process results (world
// sizes 2 and 4, f32 and bf16, payloads split over several rounds and
// payloads too large for a slot row, which fall back to Gloo), the gather to
// one rank on both backends, and its failure reporting: a peer that exits is
// UNAVAILABLE naming it, one that stops answering is DEADLINE_EXCEEDED.
// Ranks are threads with their own segment mappings and file descriptions.
#include "collectives/shm_communicator.h"

#include <ATen/ATen.h>
#include <gloo/rendezvous/hash_store.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "collectives/gloo_communicator.h"
#include "tests/testing/status_matchers.h"

namespace shardlm {
namespace {

using ::shardlm::testing::IsOk;
using ::shardlm::testing::StatusIs;
using ::testing::HasSubstr;

std::unique_ptr<Communicator> Make(int rank, int world, gloo::rendezvous::HashStore& store, bool shm,
                                   int64_t slot_bytes, std::chrono::milliseconds timeout) {
  GlooOptions g;
  g.timeout = timeout;
  g.prefix = "test";
  auto store_ptr = std::shared_ptr<gloo::rendezvous::Store>(&store, [](auto*) {});
  auto gloo = MakeGlooCommunicator({rank, world}, store_ptr, g);
  EXPECT_THAT(gloo, IsOk());
  if (!shm) return std::move(*gloo);
  ShmOptions o;
  o.prefix = "test";
  o.timeout = timeout;
  o.slot_bytes = slot_bytes;
  return MaybeUseSharedMemory({rank, world}, store, std::move(*gloo), o);
}

void RunRanks(int world, bool shm, int64_t slot_bytes, const std::function<void(int, Communicator&)>& body,
              std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  gloo::rendezvous::HashStore store;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto comm = Make(r, world, store, shm, slot_bytes, timeout);
      ASSERT_EQ(IsSharedMemory(*comm), shm);
      body(r, *comm);
      EXPECT_THAT(comm->Barrier(), IsOk());
    });
  }
  for (auto& t : threads) t.join();
}

at::Tensor Input(int rank, std::vector<int64_t> shape, at::ScalarType dtype) {
  at::Tensor t = at::arange(c10::multiply_integers(shape), at::kFloat).reshape(shape);
  return (t * 0.25 + rank * 100.0 - 3.0).to(dtype);
}

struct Param {
  int world;
  at::ScalarType dtype;
  int64_t slot_bytes;
};
class ShmTest : public ::testing::TestWithParam<Param> {};

TEST_P(ShmTest, AllGatherReduceScatterAndGatherMatchThePlainResult) {
  const auto [world, dtype, slot_bytes] = GetParam();
  RunRanks(world, /*shm=*/true, slot_bytes, [&, world = world, dtype = dtype](int rank, Communicator& comm) {
    for (int64_t rows : {1, 7, 40}) {
      // all-gather along dim 1 and dim 0
      std::vector<at::Tensor> parts;
      for (int r = 0; r < world; ++r) parts.push_back(Input(r, {rows, 6}, dtype));
      auto got = comm.AllGather(Input(rank, {rows, 6}, dtype), 1);
      ASSERT_THAT(got, IsOk());
      EXPECT_TRUE(at::equal(*got, at::cat(parts, 1))) << "rows " << rows;
      auto got0 = comm.AllGather(Input(rank, {rows, 6}, dtype), 0);
      ASSERT_THAT(got0, IsOk());
      EXPECT_TRUE(at::equal(*got0, at::cat(parts, 0)));
      // reduce-scatter: the f32 sum over ranks, rounded once
      const int64_t cols = 4 * world;
      at::Tensor sum = at::zeros({rows, cols}, at::kFloat);
      for (int r = 0; r < world; ++r) sum += Input(r, {rows, cols}, dtype).to(at::kFloat);
      auto mine = comm.ReduceScatter(Input(rank, {rows, cols}, dtype), 1);
      ASSERT_THAT(mine, IsOk());
      EXPECT_TRUE(at::equal(*mine, sum.narrow(1, rank * 4, 4).to(dtype))) << "rows " << rows;
      // gather to rank 1 only
      auto g = comm.Gather(Input(rank, {rows, 6}, dtype), 1, 1);
      ASSERT_THAT(g, IsOk());
      if (rank == 1) {
        EXPECT_TRUE(at::equal(*g, at::cat(parts, 1)));
      } else {
        EXPECT_FALSE(g->defined());
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Shapes, ShmTest,
                         ::testing::Values(Param{2, at::kFloat, 4 << 20}, Param{2, at::kBFloat16, 4 << 20},
                                           Param{4, at::kFloat, 4 << 20}, Param{4, at::kBFloat16, 4 << 20},
                                           // 256-byte slots: several rounds, and rows too wide -> Gloo
                                           Param{2, at::kFloat, 256}, Param{4, at::kBFloat16, 256}));

TEST(GlooGatherTest, OnlyTheRootReceives) {
  RunRanks(3, /*shm=*/false, 0, [](int rank, Communicator& comm) {
    auto g = comm.Gather(Input(rank, {2, 5}, at::kFloat), 1, 0);
    ASSERT_THAT(g, IsOk());
    if (rank == 0) {
      EXPECT_TRUE(at::equal(*g, at::cat({Input(0, {2, 5}, at::kFloat), Input(1, {2, 5}, at::kFloat),
                                         Input(2, {2, 5}, at::kFloat)},
                                        1)));
    } else {
      EXPECT_FALSE(g->defined());
    }
  });
}

TEST(ShmFailureTest, AnExitedPeerIsUnavailableNamingIt) {
  gloo::rendezvous::HashStore store;
  std::unique_ptr<Communicator> c0, c1;
  std::thread t1([&] { c1 = Make(1, 2, store, true, 1 << 20, std::chrono::seconds(20)); });
  c0 = Make(0, 2, store, true, 1 << 20, std::chrono::seconds(20));
  t1.join();
  ASSERT_TRUE(IsSharedMemory(*c0) && IsSharedMemory(*c1));
  c1.reset();  // closes its segment descriptor: what the kernel does when a process dies
  const auto t0 = std::chrono::steady_clock::now();
  auto got = c0->AllGather(at::ones({2, 3}), 1);
  EXPECT_THAT(got.status(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 1 exited")));
  EXPECT_THAT(got.status(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("failed on rank 0 of 2")));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  // Broken for good: the group re-forms.
  EXPECT_THAT(c0->ReduceScatter(at::ones({2, 4}), 1).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 1 exited")));
}

TEST(ShmFailureTest, ASilentPeerTimesOut) {
  gloo::rendezvous::HashStore store;
  std::unique_ptr<Communicator> c0, c1;
  std::thread t1([&] { c1 = Make(1, 2, store, true, 1 << 20, std::chrono::milliseconds(300)); });
  c0 = Make(0, 2, store, true, 1 << 20, std::chrono::milliseconds(300));
  t1.join();
  ASSERT_TRUE(IsSharedMemory(*c0));
  auto got = c0->ReduceScatter(at::ones({2, 4}), 1);  // rank 1 is alive but never calls
  EXPECT_THAT(got.status(), StatusIs(absl::StatusCode::kDeadlineExceeded,
                                     HasSubstr("timed out after 300 ms waiting for rank 1")));
}

}  // namespace
}  // namespace shardlm
