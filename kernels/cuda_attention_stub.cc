// The CPU build: no CUDA kernels (kernels/cuda_attention.h).
#include "kernels/cuda_attention.h"

namespace shardlm {

bool CudaPagedAttention(const at::Tensor&, const at::Tensor&, const at::Tensor&, at::Tensor&,
                        const AttentionBatch&) {
  return false;
}

void SetCudaAttentionMaxSplits(int) {}

bool HaveCudaKernels() { return false; }

bool CudaPagedAttentionTakes(const at::Tensor&, int64_t) { return false; }

}  // namespace shardlm
