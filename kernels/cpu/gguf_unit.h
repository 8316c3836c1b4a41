// One unit of a GGUF row (a 32-weight block, or a K-quant's 256-weight
// super-block) unpacked from the file's layout (formats/quant_blocks.cc):
// its quants, unsigned, and its scales' bits. What the CPU's panels
// (quant_pack.cc) and the GPU's planes (kernels/cuda/quant_planes.h) are
// each repacked from. Header-only plain C++: the GPU's checks, which link no
// library of the project's, include it too.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/block_format.h"
#include "kernels/cpu/quant_layout.h"

namespace shardlm::kernels {

// One unit of one row as the file stores it, unpacked: the quants
// (unsigned: Q8_0's int8 plus 128) and the scales' bits.
struct UnitValues {
  uint8_t q[256] = {};
  uint16_t d = 0, second = 0;  // second: Q4_1/Q5_1 m, Q4_K/Q5_K dmin
  uint8_t sc[16] = {};         // Q4_K/Q5_K: 6-bit scales; Q6_K: int8 scales' bits
  uint8_t mn[8] = {};          // Q4_K/Q5_K: 6-bit minimums
};

inline uint32_t Load32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

// Q8_0: f16 d, int8 q[32]; Q4_0/Q4_1: f16 d (m), qs[16]; Q5_0/Q5_1: f16 d (m), u32 qh, qs[16].
inline void ReadSmallBlock(BlockFormat f, const uint8_t* b, UnitValues* u) {
  u->d = LoadHalfBits(b);
  if (f == BlockFormat::kQ8_0) {
    for (int j = 0; j < 32; ++j) u->q[j] = static_cast<uint8_t>(static_cast<int8_t>(b[2 + j]) + 128);
    return;
  }
  const bool with_min = f == BlockFormat::kQ4_1 || f == BlockFormat::kQ5_1;
  const uint8_t* p = b + 2;
  if (with_min) {
    u->second = LoadHalfBits(p);
    p += 2;
  }
  uint32_t qh = 0;
  if (f == BlockFormat::kQ5_0 || f == BlockFormat::kQ5_1) {
    qh = Load32(p);
    p += 4;
  }
  for (int j = 0; j < 16; ++j) {
    u->q[j] = static_cast<uint8_t>((p[j] & 0x0f) | ((qh >> j) & 1u) << 4);
    u->q[j + 16] = static_cast<uint8_t>((p[j] >> 4) | ((qh >> (j + 16)) & 1u) << 4);
  }
}

// Q4_K: f16 d, f16 dmin, scales[12], qs[128]; Q5_K: qh[32] before qs (formats/quant_blocks.cc).
inline void ReadQ45K(BlockFormat f, const uint8_t* b, UnitValues* u) {
  u->d = LoadHalfBits(b);
  u->second = LoadHalfBits(b + 2);
  const uint8_t* s = b + 4;
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      u->sc[j] = s[j] & 63;
      u->mn[j] = s[j + 4] & 63;
    } else {
      u->sc[j] = static_cast<uint8_t>((s[j + 4] & 0x0f) | ((s[j - 4] >> 2) & 0x30));
      u->mn[j] = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 2) & 0x30));
    }
  }
  const bool q5 = f == BlockFormat::kQ5_K;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + (q5 ? 48 : 16);
  for (int e = 0; e < 256; ++e) {
    const int sub = e / 32, l = e % 32;
    int q = (qs[(e / 64) * 32 + l] >> (4 * (sub % 2))) & 0x0f;
    if (q5) q |= ((qh[l] >> sub) & 1) << 4;
    u->q[e] = static_cast<uint8_t>(q);
  }
}

// Q6_K: ql[128], qh[64], int8 scales[16], f16 d.
inline void ReadQ6K(const uint8_t* b, UnitValues* u) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  std::memcpy(u->sc, b + 192, 16);
  u->d = LoadHalfBits(b + 208);
  for (int e = 0; e < 256; ++e) {
    const int half = e / 128, within = e % 128;
    const int low = (ql[half * 64 + within % 64] >> (4 * (within / 64))) & 0x0f;
    const int high = (qh[half * 32 + within % 32] >> (2 * (within / 32))) & 3;
    u->q[e] = static_cast<uint8_t>(low | high << 4);
  }
}

inline void ReadUnit(BlockFormat f, const uint8_t* b, UnitValues* u) {
  if (f == BlockFormat::kQ6_K) return ReadQ6K(b, u);
  if (IsKQuant(f)) return ReadQ45K(f, b, u);
  ReadSmallBlock(f, b, u);
}

}  // namespace shardlm::kernels
