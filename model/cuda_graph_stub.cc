// The CPU build: no CUDA graphs (model/cuda_graph.h).
#include "model/cuda_graph.h"

namespace shardlm {

std::unique_ptr<CudaGraphs> MakeCudaGraphs(c10::Device) { return nullptr; }

}  // namespace shardlm
