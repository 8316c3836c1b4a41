// Capturing and replaying CUDA graphs on libtorch's streams.
//
// The CUDA variant (SHARDLM_CUDA) compiles cuda_graph.cc over
// at::cuda::CUDAGraph; the CPU build compiles cuda_graph_stub.cc, whose
// MakeCudaGraphs returns nullptr.
//
//   std::unique_ptr<CudaGraphs> graphs = MakeCudaGraphs(device);
//   SHARDLM_ASSIGN_OR_RETURN(int g, graphs->Capture([&] { return RunTheStep(); }));
//   ...                                   // refill the static inputs
//   SHARDLM_RETURN_IF_ERROR(graphs->Replay(g));
#pragma once

#include <c10/core/Device.h>

#include <functional>
#include <memory>

#include "absl/status/statusor.h"

namespace shardlm {

class CudaGraphs {
 public:
  virtual ~CudaGraphs() = default;
  // Runs `fn` once on a side stream (the warm-up: cuBLAS handles and
  // workspaces, the allocator's first blocks, NCCL's first launch), then
  // captures a second run of it into a new graph. Capture is in thread-local
  // mode, so that the NCCL watchdog's event queries from its own thread do not
  // break it. Every graph shares one memory pool: what `fn` allocates while
  // captured lives there, and a tensor read after a replay (the graph's
  // output) must be kept by the caller so that later captures do not reuse
  // its memory. Graphs must not run concurrently. Returns the graph's index.
  virtual absl::StatusOr<int> Capture(const std::function<absl::Status()>& fn) = 0;
  // Launches graph `index` on the current stream of the device.
  virtual absl::Status Replay(int index) = 0;
};

// Graphs on `device` (a CUDA device); nullptr in a build without CUDA.
std::unique_ptr<CudaGraphs> MakeCudaGraphs(c10::Device device);

}  // namespace shardlm
