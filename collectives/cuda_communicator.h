// The collectives of a rank whose tensors are on a GPU: NCCL on libtorch's
// current CUDA stream (collectives/nccl_communicator.h), bootstrapped through
// the same store as Gloo. The CUDA variant builds cuda_communicator.cc; the
// CPU build a stub that says what is missing.
//
//   SHARDLM_ASSIGN_OR_RETURN(auto comm, MakeCudaCommunicator(rank, store, /*device=*/0, timeout));
#pragma once

#include <chrono>
#include <memory>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"

namespace gloo::rendezvous {
class Store;
}  // namespace gloo::rendezvous

namespace shardlm {

absl::StatusOr<std::unique_ptr<Communicator>> MakeCudaCommunicator(
    RankInfo rank, std::shared_ptr<gloo::rendezvous::Store> store, int device,
    std::chrono::milliseconds timeout);

}  // namespace shardlm
