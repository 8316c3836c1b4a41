// A quantized weight's planes for the GPU's few-row product
// (kernels/cuda/quant_gemv.h, docs/gpu_quantized.md): n rows of GGUF blocks
// (Q8_0, Q4_0 or Q4_1, 32 weights each) repacked so that a block's quants
// are one aligned 16-byte load (two for Q8_0):
//
//   quants  uint8[n, k / 32, QuantBytes(format)]   the block's quants as in the file
//   d       uint16[n, k / 32]                      its f16 scale
//   m       uint16[n, k / 32]                      Q4_1's f16 minimum (no plane otherwise)
//
// Plain C++, header-only: the loader's host code and the check's share it.
//
//   QuantPlanes p = QuantPlanesOf(BlockFormat::kQ4_0, n, k);
//   std::vector<uint8_t> bytes(p.bytes);
//   RepackToPlanes(BlockFormat::kQ4_0, gguf_rows, n, k, bytes.data());
#pragma once

#include <cstdint>
#include <cstring>

#include "common/block_format.h"

namespace shardlm::kernels::cuda {

// Whether the GPU's product multiplies `format` kept in its blocks.
constexpr bool GpuQuantFormat(BlockFormat format) {
  return format == BlockFormat::kQ8_0 || format == BlockFormat::kQ4_0 || format == BlockFormat::kQ4_1;
}

// Bytes of one block's quants: 32 for Q8_0, 16 for the 4-bit formats.
constexpr int64_t QuantBytes(BlockFormat format) { return format == BlockFormat::kQ8_0 ? 32 : 16; }

// Where each plane of an [n, k] weight begins in its storage, and its size.
struct QuantPlanes {
  int64_t quants = 0;  // byte offsets
  int64_t d = 0;
  int64_t m = -1;  // -1: no plane of minimums
  int64_t bytes = 0;
};

// The planes of an [n, k] weight in `format` (k a multiple of 32), each
// starting on a 256-byte boundary.
constexpr QuantPlanes QuantPlanesOf(BlockFormat format, int64_t n, int64_t k) {
  const int64_t blocks = n * (k / 32);
  auto round_up = [](int64_t x) { return (x + 255) / 256 * 256; };
  QuantPlanes p;
  p.quants = 0;
  p.d = round_up(blocks * QuantBytes(format));
  int64_t end = p.d + blocks * 2;
  if (format == BlockFormat::kQ4_1) {
    p.m = round_up(end);
    end = p.m + blocks * 2;
  }
  p.bytes = round_up(end);
  return p;
}

// n rows of GGUF blocks (each row k / 32 blocks, rows contiguous) into planes
// (QuantPlanesOf(format, n, k).bytes bytes at `out`; padding zeroed).
inline void RepackToPlanes(BlockFormat format, const uint8_t* rows, int64_t n, int64_t k, uint8_t* out) {
  const QuantPlanes p = QuantPlanesOf(format, n, k);
  std::memset(out, 0, static_cast<size_t>(p.bytes));
  const int64_t blocks = n * (k / 32), block_bytes = BlockLayoutOf(format).bytes, qb = QuantBytes(format);
  // The scale leads every block; Q4_1's minimum follows it; then the quants.
  const int64_t quants_at = format == BlockFormat::kQ4_1 ? 4 : 2;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = rows + b * block_bytes;
    std::memcpy(out + p.d + 2 * b, block, 2);
    if (p.m >= 0) std::memcpy(out + p.m + 2 * b, block + 2, 2);
    std::memcpy(out + p.quants + qb * b, block + quants_at, static_cast<size_t>(qb));
  }
}

}  // namespace shardlm::kernels::cuda
