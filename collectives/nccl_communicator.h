// NCCL backend of the Communicator, for CUDA tensors (one GPU per rank).
//
// Bootstrap: rank 0 creates the NCCL unique id and publishes it in the same
// key-value store Gloo uses (served by the coordinator), so no shared file
// system is needed.
//
// Two ways to run a collective:
// - On the compute stream (NcclOptions::stream set: the worker passes
//   libtorch's current stream). The collective is ordered after the kernels
//   that produced its input and before those that read its output, and the
//   host does not wait for it. A watchdog thread polls the last collective's
//   event and ncclCommGetAsyncError; past the timeout (a dead or stopped
//   peer) or on an error it aborts the communicator (ncclCommAbort), which
//   ends the hung kernels, and AsyncError() reports it once the step's
//   results are on the host.
// - On a private stream, waited for per call with the same timeout (no
//   stream given: tests, and callers without libtorch's CUDA runtime).
// Either way a failure returns UNAVAILABLE or DEADLINE_EXCEEDED naming the
// rank, and the communicator stays broken afterwards.
//
// Compiled when the CUDA toolkit and NCCL are found (SHARDLM_WITH_NCCL).
#pragma once

#include <chrono>
#include <functional>
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
  // Returns the cudaStream_t to enqueue on, called per collective; empty:
  // a private stream, waited for per call.
  std::function<void*()> stream;
};

absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(
    RankInfo rank, std::shared_ptr<gloo::rendezvous::Store> store, const NcclOptions& options);

// Number of CUDA devices visible (0 without a GPU or a driver).
int CudaDeviceCount();

}  // namespace shardlm
