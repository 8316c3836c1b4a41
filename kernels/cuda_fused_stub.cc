// The CPU build: no CUDA kernels (kernels/cuda_fused.h).
#include "kernels/cuda_fused.h"

namespace shardlm::kernels {

void SetCudaFusedKernels(bool) {}
at::Tensor CudaRmsNorm(const at::Tensor&, const at::Tensor&, double) { return at::Tensor(); }
bool CudaRotaryInPlace(at::Tensor&, int64_t, int64_t, const at::Tensor&, const at::Tensor&) { return false; }
at::Tensor CudaSiluMul(const at::Tensor&) { return at::Tensor(); }
void SetCudaGemvMaxRows(int64_t) {}
int64_t CudaGemvMaxRows() { return 0; }
bool CudaRotaryKvInPlace(at::Tensor&, int64_t, int64_t, int64_t, const at::Tensor&, const at::Tensor&,
                         const at::Tensor&, at::Tensor&, at::Tensor&) {
  return false;
}
at::Tensor CudaLinear(const at::Tensor&, const at::Tensor&, const at::Tensor&) { return at::Tensor(); }
at::Tensor CudaLinearSwiGlu(const at::Tensor&, const at::Tensor&) { return at::Tensor(); }
bool CudaLinearAddTo(at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&) { return false; }
// No weight is kept in blocks on a GPU without the CUDA variant (the loader makes none).
at::Tensor CudaQuantLinear(const at::Tensor&, const CudaQuantWeight&, const at::Tensor&) {
  return at::Tensor();
}
at::Tensor CudaQuantLinearSwiGlu(const at::Tensor&, const CudaQuantWeight&) { return at::Tensor(); }
bool CudaQuantLinearAddTo(at::Tensor&, const at::Tensor&, const CudaQuantWeight&, const at::Tensor&) {
  return false;
}
at::Tensor CudaQuantRows(const CudaQuantWeight&, const at::Tensor&, at::ScalarType) { return at::Tensor(); }
int64_t CudaQuantMaxRows(BlockFormat) { return 0; }
bool CudaQuantTakes(const at::Tensor&, const CudaQuantWeight&, const at::Tensor&) { return false; }
bool CudaQuantLinearInto(at::Tensor&, const at::Tensor&, const CudaQuantWeight&, const at::Tensor&, bool) {
  return false;
}

}  // namespace shardlm::kernels
