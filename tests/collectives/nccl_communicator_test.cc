// NCCL backend, world size 1 (NCCL refuses two ranks on one GPU; the
// multi-rank logic is covered by the Gloo tests). Skips, saying why, where
// there is no GPU or libtorch was built without CUDA.
#include "collectives/nccl_communicator.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gtest/gtest.h>

namespace shardlm {
namespace {

TEST(NcclCommunicatorTest, WorldSizeOneCollectivesOnTheGpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the NCCL backend runs only where a GPU is";
  if (!at::hasCUDA()) GTEST_SKIP() << "this libtorch has no CUDA support (Debian's CPU build)";
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  auto comm = MakeNcclCommunicator({0, 1}, store, NcclOptions{});
  ASSERT_TRUE(comm.ok()) << comm.status();
  at::Tensor x = at::arange(12, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA)).reshape({3, 4});
  auto gathered = (*comm)->AllGather(x, 1);
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  EXPECT_TRUE(gathered->equal(x));
  auto scattered = (*comm)->ReduceScatter(x, 1);
  ASSERT_TRUE(scattered.ok()) << scattered.status();
  EXPECT_TRUE(scattered->equal(x));
  at::Tensor y = x.clone();
  ASSERT_TRUE((*comm)->AllReduce(y).ok());
  EXPECT_TRUE(y.equal(x));
  EXPECT_TRUE((*comm)->Barrier().ok());
}

// The worker's mode: collectives on the caller's stream, no host wait, the
// watchdog watching; results are read after a stream sync.
TEST(NcclCommunicatorTest, ComputeStreamModeWithoutHostWaits) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the NCCL backend runs only where a GPU is";
  if (!at::hasCUDA()) GTEST_SKIP() << "this libtorch has no CUDA support (Debian's CPU build)";
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  NcclOptions o;
  o.stream = []() -> void* { return nullptr; };  // the default stream, which ATen also uses here
  auto comm = MakeNcclCommunicator({0, 1}, store, o);
  ASSERT_TRUE(comm.ok()) << comm.status();
  at::Tensor x = at::arange(12, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA)).reshape({3, 4});
  for (int i = 0; i < 100; ++i) {
    auto gathered = (*comm)->AllGather(x, 1);
    ASSERT_TRUE(gathered.ok()) << gathered.status();
    EXPECT_TRUE(gathered->cpu().equal(x.cpu()));
  }
  EXPECT_TRUE((*comm)->AsyncError().ok()) << (*comm)->AsyncError();
}

}  // namespace
}  // namespace shardlm
