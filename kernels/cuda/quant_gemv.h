// Products of a few rows over a weight kept in GGUF blocks on an NVIDIA GPU
// (W4A16, W5A16, W6A16 and W8A16: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the
// K-quants Q4_K, Q5_K and Q6_K; f32 or bf16 activations;
// docs/gpu_quantized.md). The weight is in planes (quant_planes.h); the
// product is gemv.h's, each block of 32 unpacked in registers
// (quant_block.h):
//
//   y[m, j] = finish(sum_b d0[j, b] * sum_{i<16} x[m, 32 b + i] * q[j, b, i]
//                        + d1[j, b] * sum_{i>=16} x[m, 32 b + i] * q[j, b, i]
//                        + mn[j, b] * sum_i x[m, 32 b + i])
//
// (d0 = d1 but for Q6_K; mn 0 but for the formats with a minimum), the sums
// in f32, and finish the epilogue of gemv.h (store, add to y, or the SwiGLU
// of a [gate; up] weight of 2n rows). More rows, and a tied embedding's
// lookups, go through LaunchQuantRows: the rows dequantized to the compute
// dtype.
//
// Plain C++ (no CUDA or torch headers); launches on `stream` (a
// cudaStream_t) and returns nullptr or a static string naming the error.
#pragma once

#include <cstdint>

#include "common/block_format.h"
#include "gemv.h"  // DType, GemvEpilogue, kGemvMaxRows (relative, as in gemv.cu)

namespace shardlm::kernels::cuda {

// A weight's planes on the device (quant_planes.h): base pointers of each.
struct QuantWeightPlanes {
  BlockFormat format = BlockFormat::kNone;
  const void* quants = nullptr;
  const void* high = nullptr;  // the fifth (and sixth) bits: Q5_0, Q5_1, Q5_K, Q6_K
  const void* d = nullptr;
  const void* m = nullptr;   // minimums: Q4_1, Q5_1, Q4_K, Q5_K
  const void* sc = nullptr;  // sub-block scales: the K-quants
};

// Whether the kernel takes these operands: a GPU format with each of its
// planes, 1..kGemvMaxRows rows, k whole blocks (a multiple of 32, of 256 for
// the K-quants), x and its row stride 16-byte aligned, the quants 16-byte
// aligned.
bool QuantGemvTakes(DType dtype, const QuantWeightPlanes& w, int64_t rows, int64_t k, const void* x,
                    int64_t x_stride);

// x [rows, k] (rows x_stride elements apart), w [n or 2n, k] in planes,
// bias [n] or nullptr (not with kSwiGlu), y [rows, n] (rows y_stride apart);
// x, bias and y of `dtype`.
const char* LaunchQuantGemv(DType dtype, GemvEpilogue epilogue, const void* x, int64_t x_stride,
                            const QuantWeightPlanes& w, const void* bias, void* y, int64_t y_stride,
                            int64_t rows, int64_t n, int64_t k, void* stream);

// out[c, :] = row index[c] of the weight (n rows of k), dequantized to
// `dtype` (d * q, rounded once); index (int64, on the device) null: every
// row in order (count = n). out is [count, k] contiguous.
const char* LaunchQuantRows(DType dtype, const QuantWeightPlanes& w, int64_t n, int64_t k,
                            const int64_t* index, int64_t count, void* out, void* stream);

}  // namespace shardlm::kernels::cuda
