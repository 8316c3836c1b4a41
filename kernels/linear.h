// The projections of the forward pass: out = x @ w^T (+ bias), nn.Linear's
// contract, on the CPU.
//
//   x    dtype[m, in]      rows contiguous (a row stride is allowed)
//   w    dtype[out, in]    the weight as the checkpoint stores it
//   out  dtype[m, out]
//
// Up to GemvMaxRows(dtype) rows go to the kernels of cpu/gemv.h, which
// stream the weight once across all threads; more go to ATen's GEMM (OpenBLAS
// for f32, oneDNN for bf16). On AVX-512 the kernels take any number of rows
// with one read of the weight, and serve every f32 product and bf16 up to 16
// rows; the AVX2 kernels read the weight once per 8 rows, so they stop at 8
// (f32) and 4 (bf16). The cut-overs are where GEMM wins (docs/cpu_kernels.md).
//
//   at::Tensor y = kernels::Linear(h, layer.qkv, layer.qkv_bias);
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace shardlm::kernels {

// Rows up to which Linear uses the GEMV kernels for `dtype`
// (SHARDLM_GEMV_MAX_ROWS overrides; 0 turns them off, for comparisons).
int64_t GemvMaxRows(at::ScalarType dtype);

at::Tensor Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias = at::Tensor());

}  // namespace shardlm::kernels
