// The projections of the forward pass: out = x @ w^T (+ bias), nn.Linear's
// contract, on the CPU.
//
//   x    dtype[m, in]      rows contiguous (a row stride is allowed)
//   w    dtype[out, in]    the weight as the checkpoint stores it
//   out  dtype[m, out]
//
// Up to kMaxGemvRows rows (decode at small batch) go to the GEMV kernels of
// cpu/gemv.h, which stream the weight once across all threads and reach the
// memory's read bandwidth; more rows (prefill, large batches) are
// compute-bound and go to ATen's GEMM (OpenBLAS for f32, oneDNN for bf16).
// Tiling small batches through the GEMV kernels would stream the weight once
// per tile of 8 rows, so the cut-over is where GEMM wins (docs/cpu_kernels.md).
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
