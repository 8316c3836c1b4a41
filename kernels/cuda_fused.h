// The CUDA element-wise kernels (kernels/cuda/elementwise.h) behind fused.h's
// device path, for CUDA tensors of f32 or bf16.
//
// A CUDA build (SHARDLM_CUDA) compiles cuda_fused.cc; the CPU build
// cuda_fused_stub.cc, which handles nothing. An undefined result (or false)
// means "not handled here": fused.cc then uses its ATen operators, as it does
// for every call after SetCudaFusedKernels(false) (shardlm_bench --no-cuda-fused
// measures what the kernels save, docs/gpu.md).
#pragma once

#include <ATen/core/Tensor.h>

namespace shardlm::kernels {

// On by default; main sets it before any step runs.
void SetCudaFusedKernels(bool on);

at::Tensor CudaRmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);
bool CudaRotaryInPlace(at::Tensor& x, int64_t heads, int64_t head_dim, const at::Tensor& cos,
                       const at::Tensor& sin);
at::Tensor CudaSiluMul(const at::Tensor& gate_up);

}  // namespace shardlm::kernels
