// The CPU build: no NCCL in the worker (collectives/cuda_communicator.h).
#include "collectives/cuda_communicator.h"

namespace shardlm {

absl::StatusOr<std::unique_ptr<Communicator>> MakeCudaCommunicator(RankInfo rank,
                                                                   std::shared_ptr<gloo::rendezvous::Store>,
                                                                   int, std::chrono::milliseconds) {
  return absl::FailedPreconditionError(
      "rank " + std::to_string(rank.rank) +
      ": GPU collectives need NCCL, which this CPU build of shardlm does not have (docs/gpu.md)");
}

}  // namespace shardlm
