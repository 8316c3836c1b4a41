// The element-wise parts of a layer on an NVIDIA GPU, one kernel each where
// ATen takes several: RMSNorm (ATen: 8 kernels), rotary embedding in place
// (ATen: 8; with the KV write, 10) and SiLU-and-multiply (ATen: 2). At batch 1 a step is a thousand
// such small kernels, and their count, not their bytes, is what keeps a decode
// step above the weights' memory floor (docs/gpu.md).
//
// Each rounds as kernels/fused.cc's ATen versions do: f32 arithmetic, products
// and sums never fused into one rounding (__fmul_rn, __fadd_rn), the result
// rounded to the dtype where ATen rounds it. Only the RMSNorm's sum of squares
// may differ from ATen's in f32 rounding (another summation order).
//
// Plain C++ (no CUDA or torch headers), like paged_attention.h. Each launcher
// enqueues on `stream` (a cudaStream_t) and returns nullptr or a static string
// naming the error.
#pragma once

#include <cstdint>

#include "paged_attention.h"  // DType (relative, as in paged_attention.cu)

namespace shardlm::kernels::cuda {

// out[r, :] = round(round(x[r, :] * rsqrt(mean(x[r, :]^2) + eps)) * w), x rows `x_stride`
// elements apart, out contiguous [rows, n], w [n]; all of `dtype`.
const char* LaunchRmsNorm(DType dtype, const void* x, int64_t x_stride, const void* w, void* out,
                          int64_t rows, int64_t n, float eps, void* stream);

// Rotate-half of the first `heads` heads of each row of x (rows `ld` elements apart, heads
// contiguous), in place: (x1, x2) -> (x1 c - x2 s, x2 c + x1 s) with cos, sin f32[rows, head_dim / 2].
const char* LaunchRotary(DType dtype, void* x, int64_t ld, int64_t rows, int64_t heads, int64_t head_dim,
                         const float* cos, const float* sin, void* stream);

// LaunchRotary over the q and k heads of qkv rows laid out [q heads | kv_heads k | kv_heads v],
// and row r's rotated k and its v copied to KV slot slots[r] of k_cache and v_cache
// ([slots, kv_heads, head_dim] contiguous): the decode step's rotary and KV write in one kernel.
const char* LaunchRotaryKv(DType dtype, void* x, int64_t ld, int64_t rows, int64_t heads, int64_t kv_heads,
                           int64_t head_dim, const float* cos, const float* sin, const int64_t* slots,
                           void* k_cache, void* v_cache, void* stream);

// out[r, i] = round(round(silu(gate_up[r, i])) * gate_up[r, inter + i]); gate_up [rows, 2 inter],
// out [rows, inter], both contiguous.
const char* LaunchSiluMul(DType dtype, const void* gate_up, void* out, int64_t rows, int64_t inter,
                          void* stream);

}  // namespace shardlm::kernels::cuda
