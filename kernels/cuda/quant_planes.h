// A quantized weight's planes for the GPU's few-row product
// (kernels/cuda/quant_gemv.h, docs/gpu_quantized.md): n rows of GGUF blocks
// repacked into blocks of 32 weights whose quants are one aligned 16-byte
// load (two for Q8_0), and whose high bits and scales sit in planes beside
// them:
//
//   quants  uint8[n, k / 32, QuantBytes]  Q8_0: the 32 int8 quants; all others:
//                                         16 bytes of low nibbles, weight i in
//                                         the low nibble of byte i, weight
//                                         i + 16 in its high one
//   high    uint8[n, k / 32, HighBytes]   Q5_0, Q5_1, Q5_K: bit i is weight i's
//                                         fifth bit (4 bytes); Q6_K: bits 2i and
//                                         2i + 1 its fifth and sixth (8 bytes)
//   d       f16[n, k / 32]                the block's scale; the K-quants' super-
//           f16[n, k / 256]               block scale
//   m       f16[n, k / 32]                Q4_1's and Q5_1's minimum; Q4_K's and
//           f16[n, k / 256]               Q5_K's super-block scale of minimums
//   sc      uint8[n, k / 32, 2]           the K-quants' sub-block scales: Q4_K and
//                                         Q5_K (scale, minimum), 6 bits each;
//                                         Q6_K the int8 scales of its two 16s
//
// a plane only where the format has it. Every format the CPU keeps in its
// blocks (HasQuantKernels) is kept here too. Plain C++, header-only: the
// loader's host code and the checks share it; quant_block.h unpacks a block.
//
//   QuantPlanes p = QuantPlanesOf(BlockFormat::kQ4_K, n, k);
//   std::vector<uint8_t> bytes(p.bytes);
//   RepackToPlanes(BlockFormat::kQ4_K, gguf_rows, n, k, bytes.data());
#pragma once

#include <cstdint>
#include <cstring>

#include "common/block_format.h"
#include "kernels/cpu/gguf_unit.h"

// The format's constants are used in quant_gemv.cu's kernels too.
#if defined(__CUDACC__)
#define SHARDLM_PLANES_FN __host__ __device__ constexpr
#else
#define SHARDLM_PLANES_FN constexpr
#endif

namespace shardlm::kernels::cuda {

// Whether the GPU's product multiplies `format` kept in its blocks: every
// format the CPU's kernels keep (all but Q2_K and Q3_K).
constexpr bool GpuQuantFormat(BlockFormat format) { return HasQuantKernels(format); }

// Bytes of one 32-weight block's quants: 32 for Q8_0, 16 (low nibbles) otherwise.
SHARDLM_PLANES_FN int64_t QuantBytes(BlockFormat format) { return format == BlockFormat::kQ8_0 ? 32 : 16; }

// Bytes of one block's high bits: 4 (Q5_0, Q5_1, Q5_K), 8 (Q6_K), else 0.
SHARDLM_PLANES_FN int64_t HighBytes(BlockFormat format) {
  switch (format) {
    case BlockFormat::kQ5_0:
    case BlockFormat::kQ5_1:
    case BlockFormat::kQ5_K:
      return 4;
    case BlockFormat::kQ6_K:
      return 8;
    default:
      return 0;
  }
}

// Whether a block adds a minimum times the sum of its activations.
SHARDLM_PLANES_FN bool HasMinimum(BlockFormat format) {
  return format == BlockFormat::kQ4_1 || format == BlockFormat::kQ5_1 || format == BlockFormat::kQ4_K ||
         format == BlockFormat::kQ5_K;
}

// Where each plane of an [n, k] weight begins in its storage (-1: absent).
struct QuantPlanes {
  int64_t quants = 0;  // byte offsets
  int64_t high = -1;
  int64_t d = 0;
  int64_t m = -1;
  int64_t sc = -1;
  int64_t bytes = 0;
};

// The planes of an [n, k] weight in `format` (k a multiple of the format's
// block: 32, or 256 for the K-quants), each starting on a 256-byte boundary.
constexpr QuantPlanes QuantPlanesOf(BlockFormat format, int64_t n, int64_t k) {
  const int64_t blocks = n * (k / 32), scales = IsKQuant(format) ? n * (k / 256) : blocks;
  auto round_up = [](int64_t x) { return (x + 255) / 256 * 256; };
  QuantPlanes p;
  int64_t end = blocks * QuantBytes(format);
  if (HighBytes(format) > 0) {
    p.high = round_up(end);
    end = p.high + blocks * HighBytes(format);
  }
  p.d = round_up(end);
  end = p.d + scales * 2;
  if (HasMinimum(format)) {
    p.m = round_up(end);
    end = p.m + scales * 2;
  }
  if (IsKQuant(format)) {
    p.sc = round_up(end);
    end = p.sc + blocks * 2;
  }
  p.bytes = round_up(end);
  return p;
}

namespace internal {

// A block of 32 weights as the planes hold it: its quants (0..15, or 0..31
// with a fifth bit, 0..63 with two; Q8_0's int8 as bytes) and its sub-block
// scales (K-quants).
struct Block32 {
  uint8_t q[32];
  uint8_t sc[2];
};

// Blocks 0..7 of a K-quant super-block: their quants and sub-block scales,
// from the unit as gguf_unit.h reads it (the CPU's panels are packed from it too).
inline void SplitSuperBlock(BlockFormat format, const uint8_t* src, Block32* out) {
  UnitValues u;
  ReadUnit(format, src, &u);
  for (int j = 0; j < 8; ++j) {
    std::memcpy(out[j].q, u.q + 32 * j, 32);
    const bool six = format == BlockFormat::kQ6_K;  // two int8 scales of 16 each, else scale and minimum
    out[j].sc[0] = six ? u.sc[2 * j] : u.sc[j];
    out[j].sc[1] = six ? u.sc[2 * j + 1] : u.mn[j];
  }
}

// Block b's quants (and high bits) written to the planes from its values.
inline void PutBlock(BlockFormat format, const Block32& blk, const QuantPlanes& p, int64_t b, uint8_t* out) {
  uint8_t* lo = out + p.quants + 16 * b;
  for (int i = 0; i < 16; ++i) lo[i] = static_cast<uint8_t>((blk.q[i] & 0x0f) | (blk.q[i + 16] & 0x0f) << 4);
  if (format == BlockFormat::kQ6_K) {
    uint8_t* hi = out + p.high + 8 * b;
    for (int i = 0; i < 32; ++i)
      hi[i / 4] = static_cast<uint8_t>(hi[i / 4] | ((blk.q[i] >> 4) & 3) << (2 * (i % 4)));
  } else if (HighBytes(format) == 4) {
    uint8_t* hi = out + p.high + 4 * b;
    for (int i = 0; i < 32; ++i)
      hi[i / 8] = static_cast<uint8_t>(hi[i / 8] | ((blk.q[i] >> 4) & 1) << (i % 8));
  }
  if (p.sc >= 0) {
    out[p.sc + 2 * b] = blk.sc[0];
    out[p.sc + 2 * b + 1] = blk.sc[1];
  }
}

}  // namespace internal

// n rows of GGUF blocks (each row k / BlockLayoutOf(format).elements blocks,
// rows contiguous) into planes (QuantPlanesOf(format, n, k).bytes bytes at
// `out`; padding zeroed).
inline void RepackToPlanes(BlockFormat format, const uint8_t* rows, int64_t n, int64_t k, uint8_t* out) {
  const QuantPlanes p = QuantPlanesOf(format, n, k);
  std::memset(out, 0, static_cast<size_t>(p.bytes));
  const BlockLayout layout = BlockLayoutOf(format);
  const int64_t count = n * (k / layout.elements);
  for (int64_t b = 0; b < count; ++b) {
    const uint8_t* src = rows + b * layout.bytes;
    if (IsKQuant(format)) {
      internal::Block32 sub[8];
      internal::SplitSuperBlock(format, src, sub);
      for (int j = 0; j < 8; ++j) internal::PutBlock(format, sub[j], p, 8 * b + j, out);
      // f16 d, then dmin (Q4_K, Q5_K) lead the block; Q6_K's d ends it.
      std::memcpy(out + p.d + 2 * b, src + (format == BlockFormat::kQ6_K ? 208 : 0), 2);
      if (p.m >= 0) std::memcpy(out + p.m + 2 * b, src + 2, 2);
      continue;
    }
    // The 32-weight formats: f16 d, then the minimum (Q4_1, Q5_1), then Q5's
    // u32 of fifth bits, then the quants (nibbles already in the planes' order).
    std::memcpy(out + p.d + 2 * b, src, 2);
    int64_t at = 2;
    if (p.m >= 0) {
      std::memcpy(out + p.m + 2 * b, src + at, 2);
      at += 2;
    }
    if (p.high >= 0) {
      std::memcpy(out + p.high + 4 * b, src + at, 4);
      at += 4;
    }
    std::memcpy(out + p.quants + QuantBytes(format) * b, src + at, static_cast<size_t>(QuantBytes(format)));
  }
}

}  // namespace shardlm::kernels::cuda
