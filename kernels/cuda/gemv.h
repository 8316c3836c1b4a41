// Products of a few rows on an NVIDIA GPU: y = x @ w^T for 1 to kGemvMaxRows
// rows of x, the decode step's shape. At batch 1 a step is a weight read and
// little else, so what matters is how close a product comes to the memory's
// rate and how many other kernels ride along. One warp per output column
// streams that weight row once for all rows of x (16-byte loads that bypass
// L1, so x stays there), and the kernel finishes the column itself:
//
//   kStore   y[m, j] = round(acc(m, j) + bias[j])
//   kAddTo   y[m, j] = round(y[m, j] + round(acc(m, j) + bias[j]))      the residual add
//   kSwiGlu  y[m, j] = round(round(silu(g)) * u), g = round(acc(m, j)),  w = [gate; up], 2n rows
//                                                 u = round(acc(m, n + j))
//
// acc(m, j) = sum_k x[m, k] w[j, k] in f32; round() is to the dtype (the
// identity in f32). The roundings are where the ATen path rounds (a product's
// output, then the add or the SiLU), so only the order of the f32 sum differs
// from cuBLAS'. kernels/linear.cc sends CUDA products here when GemvTakes; the
// rest go to cuBLAS.
//
// Plain C++ (no CUDA or torch headers), like paged_attention.h; launches on
// `stream` (a cudaStream_t) and returns nullptr or a static string naming the error.
#pragma once

#include <cstdint>

#include "paged_attention.h"  // DType (relative, as in paged_attention.cu)

namespace shardlm::kernels::cuda {

inline constexpr int64_t kGemvMaxRows = 8;

enum class GemvEpilogue { kStore, kAddTo, kSwiGlu };

// Whether the kernel takes these operands: 1..kGemvMaxRows rows, k a multiple
// of 16 bytes' worth of elements, x, w and their row strides 16-byte aligned.
bool GemvTakes(DType dtype, int64_t rows, int64_t k, const void* x, int64_t x_stride, const void* w);

// x [rows, k] (rows x_stride elements apart), w [n or 2n, k] contiguous, bias [n] or
// nullptr (not with kSwiGlu), y [rows, n] (rows y_stride apart); all of `dtype`.
const char* LaunchGemv(DType dtype, GemvEpilogue epilogue, const void* x, int64_t x_stride, const void* w,
                       const void* bias, void* y, int64_t y_stride, int64_t rows, int64_t n, int64_t k,
                       void* stream);

}  // namespace shardlm::kernels::cuda
