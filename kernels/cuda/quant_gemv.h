// Products of a few rows over a weight kept in GGUF blocks on an NVIDIA GPU
// (W4A16 and W8A16: Q4_0, Q4_1 and Q8_0 weights, f32 or bf16 activations;
// docs/gpu_quantized.md). The weight is in planes (quant_planes.h); the
// product is gemv.h's, the blocks unpacked in registers:
//
//   y[m, j] = finish(sum_b d[j, b] * sum_i x[m, 32 b + i] * q[j, b, i]
//                    (+ mn[j, b] * sum_i x[m, 32 b + i], Q4_1))
//
// with q = nibble - 8 (Q4_0), nibble (Q4_1) or the stored int8 (Q8_0), the
// sums in f32, and finish the epilogue of gemv.h (store, add to y, or the
// SwiGLU of a [gate; up] weight of 2n rows). More rows, and a tied
// embedding's lookups, go through LaunchQuantRows: the rows dequantized to
// the compute dtype.
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
  const void* d = nullptr;
  const void* m = nullptr;  // Q4_1 only
};

// Whether the kernel takes these operands: a GPU format, 1..kGemvMaxRows
// rows, k a multiple of 32, x and its row stride 16-byte aligned, the
// planes' bases 16-byte aligned.
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
