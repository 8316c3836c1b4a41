// NCCL backend of the Communicator, for CUDA tensors (one GPU per rank).
//
// Bootstrap: rank 0 creates the NCCL unique id and publishes it in the same
// key-value store Gloo uses (served by the coordinator), so no shared file
// system is needed. Every collective runs on the communicator's stream and is
// watched: if it does not finish within the timeout (a dead or stopped peer),
// the communicator is aborted (ncclCommAbort) and the call returns
// DeadlineExceeded instead of hanging; it stays broken afterwards.
//
// Compiled when the CUDA toolkit and NCCL are found (SHARDLM_WITH_NCCL).
#pragma once

#include <chrono>
#include <memory>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"

namespace gloo::rendezvous {
class Store;
}  // namespace gloo::rendezvous

namespace shardlm {

struct NcclOptions {
  int device = 0;  // CUDA device of this rank
  std::chrono::milliseconds timeout{10000};
};

absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(
    RankInfo rank, std::shared_ptr<gloo::rendezvous::Store> store, const NcclOptions& options);

// Number of CUDA devices visible (0 without a GPU or a driver).
int CudaDeviceCount();

}  // namespace shardlm
