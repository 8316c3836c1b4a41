// Where things lie in a packed quantized weight (kernels/cpu/quant.h): the
// panel layout every quantized kernel (portable, AVX2, AVX-512 VNNI) and the
// packing share. Header-only and constexpr, so each SIMD translation unit
// inlines it under its own flags.
//
// A panel is 16 output rows. Along k it is a run of units: a 32-weight block
// for the 32-weight formats, a 256-weight super-block for the K-quants. A
// unit is its scales, then one sub-block of 32 k after another:
//
//   Q8_0, Q4_0, Q5_0   d f16[16]
//   Q4_1, Q5_1         d f16[16], m f16[16]
//   Q4_K, Q5_K         d f16[16], dmin f16[16], sc u8[8][16], mn u8[8][16]
//                      (the eight 6-bit scales and minimums, unpacked; [b][r])
//   Q6_K               d f16[16], sc s8[16][16] (scales of 16 weights; [j][r])
//
// and each sub-block's quants, unsigned (Q8_0 stores int8 + 128):
//
//   8-bit  8 chunks of 64 bytes; chunk c, byte 4 r + j = q[r][4 c + j]
//   4-bit  4 chunks of 64 bytes; chunk c, byte 4 r + j = q[r][8 c + j] | q[r][8 c + 4 + j] << 4
//   5-bit  the 4-bit chunks (low four bits), then a plane of 64 bytes
//   6-bit  the 4-bit chunks (low four bits), then a plane of 2 x 64 bytes
//
// A 4-bit chunk holds two "quads" (s = 2 c: its low nibbles, k 4 s .. 4 s + 3;
// s = 2 c + 1: its high nibbles), 64 bytes each in VPDPBUSD's operand order.
// The bits above the nibble of quad s sit at byte 4 r + j of the plane
// vector s * hb / 8, from bit s * hb % 8 (hb = 1 or 2 high bits), so one
// shift and one `and` move them to bit 4 of the operand's byte.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/block_format.h"

namespace shardlm::kernels {

constexpr int64_t kQuantSubBlock = 32;  // k per sub-block: one activation block

struct QuantPanelLayout {
  int64_t unit = 32;        // k per unit
  int64_t scale_bytes = 0;  // bytes of a unit's scales, before its sub-blocks
  int64_t sub_bytes = 0;    // bytes of one sub-block's quants (chunks and plane)
  int bits = 0;             // bits per quant: 8, 4, 5 or 6
};

constexpr QuantPanelLayout QuantLayoutOf(BlockFormat f) {
  switch (f) {
    case BlockFormat::kQ8_0:
      return {32, 32, 512, 8};
    case BlockFormat::kQ4_0:
      return {32, 32, 256, 4};
    case BlockFormat::kQ4_1:
      return {32, 64, 256, 4};
    case BlockFormat::kQ5_0:
      return {32, 32, 320, 5};
    case BlockFormat::kQ5_1:
      return {32, 64, 320, 5};
    case BlockFormat::kQ4_K:
      return {256, 320, 256, 4};
    case BlockFormat::kQ5_K:
      return {256, 320, 320, 5};
    case BlockFormat::kQ6_K:
      return {256, 288, 384, 6};
    default:  // no kernel keeps the others (HasQuantKernels)
      break;
  }
  return {};
}

// Bytes of one unit of a panel (16 rows): as many as the file's 16 rows of
// the unit, but for the K-quants' scales unpacked to bytes (Q4_K 2368
// against 2304, Q5_K 2880 against 2816; Q6_K 3360, the file's).
constexpr int64_t QuantUnitBytes(BlockFormat f) {
  const QuantPanelLayout l = QuantLayoutOf(f);
  return l.scale_bytes + l.unit / kQuantSubBlock * l.sub_bytes;
}

constexpr bool IsKQuant(BlockFormat f) { return QuantLayoutOf(f).unit == 256; }
// Q4_1, Q5_1 (m) and Q4_K, Q5_K (dmin): a second f16 array at byte 32.
constexpr bool HasSecondScale(BlockFormat f) {
  return f == BlockFormat::kQ4_1 || f == BlockFormat::kQ5_1 || (IsKQuant(f) && f != BlockFormat::kQ6_K);
}
// The offset a 32-weight format's stored quant carries: value = d (q + offset).
constexpr float QuantOffset(BlockFormat f) {
  return f == BlockFormat::kQ8_0   ? -128.0f
         : f == BlockFormat::kQ4_0 ? -8.0f
         : f == BlockFormat::kQ5_0 ? -16.0f
                                   : 0.0f;
}

// Offsets inside a unit's scales.
constexpr int64_t kQuantSecondScale = 32;  // m or dmin f16[16]
constexpr int64_t kQuantKScales = 64;      // Q4_K/Q5_K sc u8[8][16], then mn u8[8][16] at 192
constexpr int64_t kQuantKMins = 192;
constexpr int64_t kQuant6Scales = 32;  // Q6_K sc s8[16][16]

static inline uint16_t LoadHalfBits(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// The stored quant (unsigned) of row r, k j (0..31) of the sub-block at q.
static inline int PanelQuant(int bits, const uint8_t* q, int64_t r, int64_t j) {
  const int64_t at = 4 * r + j % 4;
  if (bits == 8) return q[(j / 4) * 64 + at];
  const uint8_t byte = q[(j / 8) * 64 + at];
  int v = j % 8 < 4 ? (byte & 0x0f) : (byte >> 4);
  if (bits > 4) {
    const int64_t hb = bits - 4, s = j / 4;
    const uint8_t plane = q[256 + (s * hb / 8) * 64 + at];
    v |= ((plane >> (s * hb % 8)) & ((1 << hb) - 1)) << 4;
  }
  return v;
}

}  // namespace shardlm::kernels
