// Host-staged collectives: a CPU communicator (shared memory or Gloo) serving
// ranks whose tensors live on a GPU. Each collective copies its input to host
// memory, runs the CPU collective there, and copies the result back to the
// tensor's device.
//
// Why: NCCL refuses two ranks on one GPU, and every GPU machine this project
// is lent has one. Staged through the host, several ranks share one GPU, so
// the sharded weights, sharded KV, uneven shards and the step protocol all run
// on a GPU (`worker --collectives host`, `serve --collectives host`). It is
// slow (a device sync and two copies per collective) and it cannot be captured
// in a CUDA graph: a test and debugging path, never a serving one.
//
//   auto comm = MakeHostStagedCommunicator(std::move(shm_or_gloo));
#pragma once

#include <memory>

#include "collectives/communicator.h"

namespace shardlm {

std::unique_ptr<Communicator> MakeHostStagedCommunicator(std::unique_ptr<Communicator> host);

}  // namespace shardlm
