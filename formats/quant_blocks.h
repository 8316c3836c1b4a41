// ggml's block-quantized weight formats, as GGUF files store them, and their
// dequantization to f32: the 32-weight blocks below, Q5_0 and Q5_1 (a fifth
// bit per weight in a u32), and the K-quants' 256-weight super-blocks with
// 6- or 8-bit sub-block scales (Q2_K to Q6_K; layouts in quant_blocks.cc),
// all exactly as gguf-py dequantizes them.
//
// A row of `n` weights is n / 32 blocks, each a scale (and for Q4_1 a
// minimum) in f16 followed by the block's quantized values:
//   Q8_0  34 bytes: f16 d, int8 q[32]                    x[j] = q[j] * d
//   Q4_0  18 bytes: f16 d, u8 qs[16] (two nibbles each)   x[j] = (nibble - 8) * d
//   Q4_1  20 bytes: f16 d, f16 m, u8 qs[16]               x[j] = nibble * d + m
// Nibbles: the low 4 bits of qs[j] are x[j], the high 4 bits x[j + 16].
// The arithmetic is the same f32 multiply and add that llama.cpp's reference
// dequantization and gguf-py (which Hugging Face transformers calls) do, with
// no fused multiply-add, so all three produce the same f32 weights bit for bit.
//
//   std::vector<float> row(576);
//   DequantizeBlocks(BlockFormat::kQ4_1, row_bytes, 576, row.data());
#pragma once

#include <cstdint>
#include <vector>

#include "common/block_format.h"

namespace shardlm {

// Dequantizes `n` weights (a multiple of the block's elements) from `src`.
void DequantizeBlocks(BlockFormat format, const uint8_t* src, int64_t n, float* out);

// Quantizes `n` f32 weights (a multiple of the format's block) into its blocks
// at `out` (n / elements * block bytes). Q8_0, Q4_0 and Q4_1 round as ggml's
// reference quantizers do: Q8_0 d = max|x| / 127, q = round(x / d); Q4_0 d =
// -(the value of largest magnitude) / 8, nibble = min(15, trunc(x / d + 8.5));
// Q4_1 d = (max - min) / 15, m = min, nibble = min(15, trunc((x - m) / d +
// 0.5)). Q4_K, Q5_K and Q6_K by plain min/max per sub-block (quant_blocks.cc),
// not ggml's search for the best scales: a little more error than
// llama-quantize's files. Scales stored in f16. Any other format aborts.
void QuantizeBlocks(BlockFormat format, const float* src, int64_t n, uint8_t* out);

// Byte offsets of a block's f16 fields (its scale; Q4_1's and Q5_1's minimum;
// a K-quant's super-block scales): where a test writes finite values into
// otherwise random blocks.
std::vector<int> HalfFieldOffsets(BlockFormat format);

// f32 to IEEE binary16 bits, rounding to nearest even.
uint16_t FloatToHalf(float f);

// IEEE binary16 and bfloat16 bit patterns to f32 (exact).
float HalfToFloat(uint16_t bits);
float Bf16ToFloat32(uint16_t bits);

}  // namespace shardlm
