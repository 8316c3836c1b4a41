// The CUDA kernels behind fused.h's and linear.h's device paths, for CUDA
// tensors of f32 or bf16: the element-wise kernels (kernels/cuda/elementwise.h)
// and the few-row products (kernels/cuda/gemv.h).
//
// A CUDA build (SHARDLM_CUDA) compiles cuda_fused.cc; the CPU build
// cuda_fused_stub.cc, which handles nothing. An undefined result (or false)
// means "not handled here": fused.cc then uses its ATen operators, as it does
// for every call after SetCudaFusedKernels(false), and linear.cc uses cuBLAS
// for products of more rows than SetCudaGemvMaxRows allows (shardlm_bench
// --no-cuda-fused and --cuda-gemv-max-rows measure what the kernels save, docs/gpu.md).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "common/block_format.h"

namespace shardlm::kernels {

// On by default; main sets it before any step runs.
void SetCudaFusedKernels(bool on);
// Products of up to n rows (0 to 8; 0: none) go to the few-row kernel, the
// rest to cuBLAS. kDefaultCudaGemvMaxRows by default: at more rows the
// kernel, which reads the weight once but unpacks x once per column, loses to
// cuBLAS (docs/gpu.md has the measurements).
inline constexpr int64_t kDefaultCudaGemvMaxRows = 4;
void SetCudaGemvMaxRows(int64_t n);
int64_t CudaGemvMaxRows();

at::Tensor CudaRmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);
bool CudaRotaryInPlace(at::Tensor& x, int64_t heads, int64_t head_dim, const at::Tensor& cos,
                       const at::Tensor& sin);
at::Tensor CudaSiluMul(const at::Tensor& gate_up);

// RotaryInPlace over qkv's first heads + kv_heads heads, and row r's rotated k
// and its v (the kv_heads heads after them) written to slot slots[r] of
// k_layer and v_layer (dtype[blocks, block_size, kv_heads, head_dim]), in one
// kernel; false (nothing done) where that kernel does not take the operands.
bool CudaRotaryKvInPlace(at::Tensor& qkv, int64_t heads, int64_t kv_heads, int64_t head_dim,
                         const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& slots,
                         at::Tensor& k_layer, at::Tensor& v_layer);

// linear.h's Linear, LinearSwiGlu (gate_up unpacked: [gate; up]) and
// LinearAddTo for up to CudaGemvMaxRows() rows (kernels/cuda/gemv.h).
at::Tensor CudaLinear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias);
at::Tensor CudaLinearSwiGlu(const at::Tensor& x, const at::Tensor& gate_up);
bool CudaLinearAddTo(at::Tensor& y, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias);

// A weight kept in GGUF blocks on the GPU (every format but Q2_K and Q3_K):
// n rows of k in the planes of kernels/cuda/quant_planes.h, `offset` bytes
// into `planes` (uint8, on the device; one tensor may hold several weights'
// planes: the segments of a projection whose parts differ in format).
struct CudaQuantWeight {
  BlockFormat format = BlockFormat::kNone;
  const at::Tensor* planes = nullptr;
  int64_t n = 0, k = 0;
  int64_t offset = 0;
};
// Linear, LinearSwiGlu ([gate; up], 2 * inter rows) and LinearAddTo over such a
// weight by the few-row product (kernels/cuda/quant_gemv.h), in launches of 8
// rows, for up to CudaQuantMaxRows rows: undefined (false) for more rows, or
// after SetCudaFusedKernels(false), where the caller multiplies
// CudaQuantRows' dequantized weight instead.
at::Tensor CudaQuantLinear(const at::Tensor& x, const CudaQuantWeight& w, const at::Tensor& bias);
at::Tensor CudaQuantLinearSwiGlu(const at::Tensor& x, const CudaQuantWeight& w);
bool CudaQuantLinearAddTo(at::Tensor& y, const at::Tensor& x, const CudaQuantWeight& w,
                          const at::Tensor& bias);
// Rows of x up to which a weight in `format` goes through the few-row product
// (cuda_fused.cc says why): 32 (Q8_0) to 64 (Q4_0).
int64_t CudaQuantMaxRows(BlockFormat format);
// Whether the few-row product takes x (and bias, n values or undefined) over w.
bool CudaQuantTakes(const at::Tensor& x, const CudaQuantWeight& w, const at::Tensor& bias);
// Whether y is a [x's rows, n] view of x's dtype and device with unit column
// stride and rows at least n apart (a segment's columns of a wider output).
inline bool CudaRowsView(const at::Tensor& y, const at::Tensor& x, int64_t n) {
  return y.dim() == 2 && y.size(0) == x.size(0) && y.size(1) == n && y.stride(1) == 1 && y.stride(0) >= n &&
         y.scalar_type() == x.scalar_type() && y.device() == x.device();
}
// y = x w^T + bias (add: y += it) where y is such a view of w.n columns;
// false, nothing done, where CudaQuantTakes or CudaRowsView does not hold.
bool CudaQuantLinearInto(at::Tensor& y, const at::Tensor& x, const CudaQuantWeight& w, const at::Tensor& bias,
                         bool add);
// Rows `index` (int64, on the weight's device; undefined: all n in order) of
// the weight dequantized to `dtype` (f32 or bf16): [count, k].
at::Tensor CudaQuantRows(const CudaQuantWeight& w, const at::Tensor& index, at::ScalarType dtype);

}  // namespace shardlm::kernels
