// One 32-weight block of a weight in planes (quant_planes.h) unpacked: its
// quants as floats and the scales that turn them into weights,
//
//   w[i] = (i < 16 ? d0 : d1) * q[i] + mn
//
// (d0 == d1 but for Q6_K, whose halves of 16 have scales of their own; mn 0
// but for the formats with a minimum). The same f32 operations as
// formats/quant_blocks.cc's dequantization, so that w is the same bits.
// Compiled by nvcc for quant_gemv.cu's kernels and by the host compiler for
// the check of the layout (tests/kernels/quant_planes_test.cc): one code for
// both, so that what the host checks is what the GPU runs.
#pragma once

#include <cstdint>

#include "common/block_format.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define SHARDLM_QUANT_FN __host__ __device__ __forceinline__
#else
#include <cmath>
#define SHARDLM_QUANT_FN inline
#endif
// Unrolled in the kernels; the host compiler (which warns of nvcc's pragma) rolls.
#if defined(__CUDA_ARCH__)
#define SHARDLM_QUANT_UNROLL _Pragma("unroll")
#else
#define SHARDLM_QUANT_UNROLL
#endif

namespace shardlm::kernels::cuda {

// A block's quants and high bits as loaded from the planes, in 32-bit words
// (little-endian): lo the 16 bytes of nibbles (Q8_0: all 8 words, its 32
// bytes), hi the fifth bits (hi[0]) or Q6_K's pairs (hi[0] for weights 0-15,
// hi[1] for 16-31).
struct BlockBits {
  uint32_t lo[8];
  uint32_t hi[2];
};

struct BlockScales {
  float d0, d1, mn;
};

// IEEE binary16 bits to f32, exactly.
SHARDLM_QUANT_FN float HalfBitsToFloat(uint16_t bits) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(bits));
#else
  const int sign = bits >> 15, exp = (bits >> 10) & 0x1f, mant = bits & 0x3ff;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    v = mant == 0 ? INFINITY : NAN;
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400), exp - 25);
  }
  return sign ? -v : v;
#endif
}

// The block's 32 quants before the scale: nibble - 8 (Q4_0), nibble with its
// fifth bit - 16 (Q5_0), with its two high bits - 32 (Q6_K), the stored int8
// (Q8_0), or as stored (the formats with a minimum).
template <BlockFormat F>
SHARDLM_QUANT_FN void UnpackQuants(const BlockBits& v, float* q) {
  if constexpr (F == BlockFormat::kQ8_0) {
    SHARDLM_QUANT_UNROLL
    for (int w = 0; w < 8; ++w) {
      SHARDLM_QUANT_UNROLL
      for (int b = 0; b < 4; ++b)
        q[4 * w + b] = static_cast<float>(static_cast<int8_t>((v.lo[w] >> (8 * b)) & 0xffu));
    }
  } else {
    constexpr int kOffset = F == BlockFormat::kQ4_0   ? 8
                            : F == BlockFormat::kQ5_0 ? 16
                            : F == BlockFormat::kQ6_K ? 32
                                                      : 0;
    constexpr bool kFifth = F == BlockFormat::kQ5_0 || F == BlockFormat::kQ5_1 || F == BlockFormat::kQ5_K;
    SHARDLM_QUANT_UNROLL
    for (int w = 0; w < 4; ++w) {
      SHARDLM_QUANT_UNROLL
      for (int b = 0; b < 4; ++b) {
        const int i = 4 * w + b;
        const unsigned byte = (v.lo[w] >> (8 * b)) & 0xffu;
        int first = static_cast<int>(byte & 0xfu), second = static_cast<int>(byte >> 4);  // weights i, i + 16
        if constexpr (kFifth) {
          first |= static_cast<int>((v.hi[0] >> i) & 1u) << 4;
          second |= static_cast<int>((v.hi[0] >> (i + 16)) & 1u) << 4;
        }
        if constexpr (F == BlockFormat::kQ6_K) {
          first |= static_cast<int>((v.hi[0] >> (2 * i)) & 3u) << 4;
          second |= static_cast<int>((v.hi[1] >> (2 * i)) & 3u) << 4;
        }
        q[i] = static_cast<float>(first - kOffset);
        q[i + 16] = static_cast<float>(second - kOffset);
      }
    }
  }
}

// The scales of block `at` (row * k / 32 + block) of planes d, m and sc.
template <BlockFormat F>
SHARDLM_QUANT_FN BlockScales ScalesAt(const uint16_t* d, const uint16_t* m, const uint8_t* sc, int64_t at) {
  BlockScales s{0.0f, 0.0f, 0.0f};
  if constexpr (F == BlockFormat::kQ4_K || F == BlockFormat::kQ5_K) {
    s.d0 = HalfBitsToFloat(d[at / 8]) * static_cast<float>(sc[2 * at]);
    s.d1 = s.d0;
    s.mn = -(HalfBitsToFloat(m[at / 8]) * static_cast<float>(sc[2 * at + 1]));
  } else if constexpr (F == BlockFormat::kQ6_K) {
    const float big = HalfBitsToFloat(d[at / 8]);
    s.d0 = big * static_cast<float>(static_cast<int8_t>(sc[2 * at]));
    s.d1 = big * static_cast<float>(static_cast<int8_t>(sc[2 * at + 1]));
  } else {
    s.d0 = HalfBitsToFloat(d[at]);
    s.d1 = s.d0;
    if constexpr (F == BlockFormat::kQ4_1 || F == BlockFormat::kQ5_1) s.mn = HalfBitsToFloat(m[at]);
  }
  return s;
}

}  // namespace shardlm::kernels::cuda
