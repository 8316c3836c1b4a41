// The CUDA variant: NCCL enqueued on libtorch's current stream.
#include "collectives/cuda_communicator.h"

#include <c10/cuda/CUDAStream.h>

#include "collectives/nccl_communicator.h"

namespace shardlm {

absl::StatusOr<std::unique_ptr<Communicator>> MakeCudaCommunicator(
    RankInfo rank, std::shared_ptr<gloo::rendezvous::Store> store, int device,
    std::chrono::milliseconds timeout) {
  NcclOptions o;
  o.device = device;
  o.timeout = timeout;
  o.stream = [device]() -> void* {
    return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
  };
  return MakeNcclCommunicator(rank, std::move(store), o);
}

}  // namespace shardlm
