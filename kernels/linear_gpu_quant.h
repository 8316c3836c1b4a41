// linear.h's products and row lookups over a weight kept in GGUF blocks on a
// GPU (LinearWeight::PrepareGpuQuantized; docs/gpu_quantized.md): up to 64
// rows of x (Q8_0: 32) go to the few-row product over the blocks, 8 rows a
// launch (cuda/quant_gemv.h, through cuda_fused.h); more rows multiply the
// weight dequantized to x's dtype for the call with ATen's product (cuBLAS).
// linear.cc calls these for such weights.
#pragma once

#include <ATen/core/Tensor.h>

#include "kernels/linear.h"

namespace shardlm::kernels::internal {

at::Tensor GpuQuantLinear(const at::Tensor& x, const LinearWeight& w, const at::Tensor& bias);
// silu(gate) * up of a [gate; up] weight.
at::Tensor GpuQuantLinearSwiGlu(const at::Tensor& x, const LinearWeight& gate_up);
void GpuQuantLinearAddTo(at::Tensor& y, const at::Tensor& x, const LinearWeight& w, const at::Tensor& bias);
// Rows `index` (clamped to the weight's) dequantized, f32[index.numel(), in].
at::Tensor GpuQuantRows(const LinearWeight& w, const at::Tensor& index);

}  // namespace shardlm::kernels::internal
