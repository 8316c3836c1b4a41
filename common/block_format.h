// ggml's block formats of quantized weights, by name and layout: what a GGUF
// file stores (formats/quant_blocks.h dequantizes and quantizes them) and what
// the CPU kernels repack and multiply (kernels/cpu/quant.h). Header-only, so
// that both can share it without a link between them.
#pragma once

#include <cstdint>
#include <cstring>

namespace shardlm {

enum class BlockFormat { kNone, kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ2_K, kQ3_K, kQ4_K, kQ5_K, kQ6_K };

struct BlockLayout {
  int64_t elements = 1;  // weights per block
  int64_t bytes = 0;     // bytes per block
};

// Q8_0: 32 weights in 34 bytes; Q4_0: 32 in 18; Q4_1: 32 in 20; Q5_0: 32 in 22; Q5_1: 32
// in 24; the K-quants' 256-weight super-blocks: Q2_K 84, Q3_K 110, Q4_K 144, Q5_K 176, Q6_K
// 210 bytes; kNone: {1, 0}.
constexpr BlockLayout BlockLayoutOf(BlockFormat format) {
  switch (format) {
    case BlockFormat::kQ8_0:
      return {32, 34};
    case BlockFormat::kQ4_0:
      return {32, 18};
    case BlockFormat::kQ4_1:
      return {32, 20};
    case BlockFormat::kQ5_0:
      return {32, 22};
    case BlockFormat::kQ5_1:
      return {32, 24};
    case BlockFormat::kQ2_K:
      return {256, 84};
    case BlockFormat::kQ3_K:
      return {256, 110};
    case BlockFormat::kQ4_K:
      return {256, 144};
    case BlockFormat::kQ5_K:
      return {256, 176};
    case BlockFormat::kQ6_K:
      return {256, 210};
    case BlockFormat::kNone:
      break;
  }
  return {1, 0};
}

// Formats the CPU kernels (kernels/cpu/quant.h) multiply kept in their blocks:
// all but Q2_K and Q3_K, which are dequantized at load.
constexpr bool HasQuantKernels(BlockFormat format) {
  return format != BlockFormat::kNone && format != BlockFormat::kQ2_K && format != BlockFormat::kQ3_K;
}

// "Q8_0", "Q4_K", ... as GGUF names them; "none".
constexpr const char* BlockFormatName(BlockFormat format) {
  switch (format) {
    case BlockFormat::kQ8_0:
      return "Q8_0";
    case BlockFormat::kQ4_0:
      return "Q4_0";
    case BlockFormat::kQ4_1:
      return "Q4_1";
    case BlockFormat::kQ5_0:
      return "Q5_0";
    case BlockFormat::kQ5_1:
      return "Q5_1";
    case BlockFormat::kQ2_K:
      return "Q2_K";
    case BlockFormat::kQ3_K:
      return "Q3_K";
    case BlockFormat::kQ4_K:
      return "Q4_K";
    case BlockFormat::kQ5_K:
      return "Q5_K";
    case BlockFormat::kQ6_K:
      return "Q6_K";
    case BlockFormat::kNone:
      break;
  }
  return "none";
}

// IEEE binary16 bits (a block's f16 scale) to f32, exact. `static`: each
// translation unit keeps its own copy under its own flags (the SIMD kernels'
// are built for AVX-512 or AVX2), so a linker never picks one of those for
// code that runs on any CPU.
static inline float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      int e = -1;
      uint32_t m = mant;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (m & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

}  // namespace shardlm
