// Projections over weights kept in ggml's 8-bit and 4-bit blocks
// (docs/quantized_weights.md): y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]).
//
// A weight arrives as n rows of GGUF blocks (32 weights each: Q8_0 an f16
// scale and 32 int8; Q4_0 an f16 scale and 32 nibbles, value nibble - 8;
// Q4_1 an f16 scale, an f16 minimum and 32 nibbles, value nibble * d + m) and
// is repacked once at load into panels of 16 output rows. Inside a panel, for
// each block of 32 k in order:
//
//   d    f16[16]          the 16 rows' scales
//   m    f16[16]          Q4_1 only: their minimums
//   q    Q8_0: 8 chunks of 64 bytes; chunk c, byte 4 r + j = q[r][4c + j] + 128 (u8)
//        Q4_*: 4 chunks of 64 bytes; chunk c, byte 4 r + j = q[r][8c + j] | q[r][8c + 4 + j] << 4
//
// so one 64-byte load (Q4: and its two nibble halves) holds four
// consecutive k of all 16 rows, the operand layout of VPDPBUSD (u8 x s8 dot
// products of four, summed into s32 lanes). Rows past n are zero (scale 0).
// Bytes per 16 x 32 weights: Q8_0 544, Q4_0 288, Q4_1 320, as in the file.
//
// Activations are quantized per row and block of 32 to int8 with one f32
// scale (dx = max|x| / 127, as llama.cpp's Q8_0 activations), and each
// block's sum of quantized values kept, so that the weight's offset (Q8_0's
// +128, Q4_0's -8) and Q4_1's minimum come out of one multiply per block:
//
//   Q8_0  y += dx * d * (dot - 128 * sx)
//   Q4_0  y += dx * d * (dot - 8 * sx)
//   Q4_1  y += dx * (d * dot + m * sx)
//
// Each output sums its blocks in k order whatever m is, so a row's result
// does not depend on the rows batched with it. Torch-free, like packed.h.
#pragma once

#include <cstdint>

#include "common/block_format.h"
#include "kernels/cpu/isa.h"

namespace shardlm::kernels {

constexpr int64_t kQuantBlock = 32;      // weights per block
constexpr int64_t kQuantPanelRows = 16;  // output rows per panel

// Bytes of one panel's block (16 rows x 32 k): 544, 288, 320.
int64_t QuantPanelBlockBytes(BlockFormat f);
// Bytes of the packed form of an [n, k] weight (k a multiple of 32).
int64_t QuantPackedBytes(BlockFormat f, int64_t n, int64_t k);

// Repacks n rows of GGUF blocks (each row k / 32 blocks, rows contiguous)
// into `out` (QuantPackedBytes(f, n, k) bytes).
void PackQuantWeight(BlockFormat f, const uint8_t* rows, int64_t n, int64_t k, uint8_t* out);

// Rows `rows[0..count)` of the weight, dequantized to f32 out[count, k] (an
// embedding lookup from a tied LM head); the same values DequantizeBlocks
// gives from the file.
void UnpackQuantRows(BlockFormat f, const uint8_t* packed, int64_t n, int64_t k, const int64_t* rows,
                     int64_t count, float* out);

// The activations of one product, quantized: qx int8[m, k], and per row and
// block dx f32[m, k / 32] and sx int32[m, k / 32].
struct QuantActivations {
  const int8_t* qx;
  const float* dx;
  const int32_t* sx;
};

// Quantizes rows [begin, end) of x (float, or uint16_t bf16 bits; row stride
// ldx) into qx/dx/sx laid out as QuantActivations describes.
template <typename T>
void QuantizeActivationRows(const T* x, int64_t ldx, int64_t k, int64_t begin, int64_t end, int8_t* qx,
                            float* dx, int32_t* sx);

enum class QuantEpilogue {
  kStore,  // y = x w^T (+ bias)
  kAddTo,  // y += round(x w^T (+ bias)): the residual add
};

template <typename T>
struct QuantArgs {
  BlockFormat format;
  QuantActivations a;  // m rows of k
  const uint8_t* w;    // packed weight
  const T* bias;       // T[n] or nullptr
  T* y;                // T[m, ldy]
  int64_t ldy;
  int64_t m;
  int64_t n;
  int64_t k;
  QuantEpilogue epilogue = QuantEpilogue::kStore;
};

// Computes the outputs of panels [p_begin, p_end) for all m rows.
using QuantF32Fn = void (*)(const QuantArgs<float>&, int64_t p_begin, int64_t p_end);
using QuantBf16Fn = void (*)(const QuantArgs<uint16_t>&, int64_t p_begin, int64_t p_end);

// AVX-512 VNNI where the CPU has it (and the active ISA is AVX-512), else
// AVX2 (with F16C) where the active ISA allows, else a portable loop; all
// three give the same values.
QuantF32Fn QuantF32(Isa isa);
QuantBf16Fn QuantBf16(Isa isa);
// Whether this CPU has AVX-512 VNNI (VPDPBUSD on 512-bit registers).
bool HasAvx512Vnni();

namespace internal {
void QuantF32Scalar(const QuantArgs<float>&, int64_t, int64_t);
void QuantBf16Scalar(const QuantArgs<uint16_t>&, int64_t, int64_t);
void QuantF32Vnni(const QuantArgs<float>&, int64_t, int64_t);
void QuantBf16Vnni(const QuantArgs<uint16_t>&, int64_t, int64_t);
void QuantF32Avx2(const QuantArgs<float>&, int64_t, int64_t);
void QuantBf16Avx2(const QuantArgs<uint16_t>&, int64_t, int64_t);
void QuantizeRowsF32Avx512(const float* x, int64_t ldx, int64_t k, int64_t begin, int64_t end, int8_t* qx,
                           float* dx, int32_t* sx);
}  // namespace internal

}  // namespace shardlm::kernels
