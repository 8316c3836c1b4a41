// Projections over weights kept in ggml's quantized blocks
// (docs/quantized_weights.md): y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]).
//
// A weight arrives as n rows of GGUF blocks: the 32-weight formats (Q8_0,
// Q4_0, Q4_1, Q5_0, Q5_1: an f16 scale, Q4_1/Q5_1 an f16 minimum, the quants)
// or the K-quants' 256-weight super-blocks (Q4_K, Q5_K: f16 d and dmin and
// eight 6-bit scales and minimums of 32 weights; Q6_K: f16 d and sixteen
// int8 scales of 16 weights). It is repacked once at load into panels of 16
// output rows (kernels/cpu/quant_layout.h): per unit (block or super-block)
// the 16 rows' scales, then per 32 k the quants, unsigned, in VPDPBUSD's
// operand order (u8 x s8 dot products of four, summed into s32 lanes), so
// one 64-byte load (and for 4 to 6 bits its nibble halves and a plane of
// high bits) holds four consecutive k of all 16 rows. Rows past n are zero.
// Bytes as in the file, but for the K-quants' scales unpacked to bytes.
//
// Activations are quantized per row and block of 32 to int8 with one f32
// scale (dx = max|x| / 127, as llama.cpp's Q8_0 activations), and each
// block's sum of quantized values kept (and each half's, for Q6_K), so that
// the weight's offset and minimum come out of one multiply per block:
//
//   Q8_0, Q4_0, Q5_0  y += dx * d * (dot - o * sx)     o = 128, 8, 16
//   Q4_1, Q5_1        y += dx * (d * dot + m * sx)
//   Q4_K, Q5_K        y += dx * ((d sc) * dot - (dmin mn) * sx)   per 32 k
//   Q6_K              y += dx * d * (sc0 (dot0 - 32 sx0) + sc1 (dot1 - 32 sx1))
//                     (halves of 16 k, integer until d)
//
// Each output sums its blocks in k order whatever m is, so a row's result
// does not depend on the rows batched with it. Torch-free, like packed.h.
#pragma once

#include <cstdint>

#include "common/block_format.h"
#include "kernels/cpu/isa.h"

namespace shardlm::kernels {

constexpr int64_t kQuantBlock = 32;      // activations per block
constexpr int64_t kQuantPanelRows = 16;  // output rows per panel

// Weights per unit along k: 32, or 256 for the K-quants; k must be a multiple.
int64_t QuantUnit(BlockFormat f);
// Bytes of the packed form of an [n, k] weight.
int64_t QuantPackedBytes(BlockFormat f, int64_t n, int64_t k);

// Repacks n rows of GGUF blocks (each row k / QuantUnit(f) blocks, rows
// contiguous) into `out` (QuantPackedBytes(f, n, k) bytes).
void PackQuantWeight(BlockFormat f, const uint8_t* rows, int64_t n, int64_t k, uint8_t* out);

// Rows `rows[0..count)` of the weight, dequantized to f32 out[count, k] (an
// embedding lookup from a tied LM head); the same values DequantizeBlocks
// gives from the file.
void UnpackQuantRows(BlockFormat f, const uint8_t* packed, int64_t n, int64_t k, const int64_t* rows,
                     int64_t count, float* out);

// The activations of one product, quantized: qx int8[m, k], per row and
// block dx f32[m, k / 32] and sx int32[m, k / 32], and per half block
// sx16 int32[m, k / 16].
struct QuantActivations {
  const int8_t* qx;
  const float* dx;
  const int32_t* sx;
  const int32_t* sx16;
};

// Quantizes rows [begin, end) of x (float, or uint16_t bf16 bits; row stride
// ldx) into qx/dx/sx/sx16 laid out as QuantActivations describes.
template <typename T>
void QuantizeActivationRows(const T* x, int64_t ldx, int64_t k, int64_t begin, int64_t end, int8_t* qx,
                            float* dx, int32_t* sx, int32_t* sx16);

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
                           float* dx, int32_t* sx, int32_t* sx16);
void QuantizeRowsF32Avx2(const float* x, int64_t ldx, int64_t k, int64_t begin, int64_t end, int8_t* qx,
                         float* dx, int32_t* sx, int32_t* sx16);
void QuantizeRowsBf16Avx2(const uint16_t* x, int64_t ldx, int64_t k, int64_t begin, int64_t end, int8_t* qx,
                          float* dx, int32_t* sx, int32_t* sx16);
}  // namespace internal

}  // namespace shardlm::kernels
