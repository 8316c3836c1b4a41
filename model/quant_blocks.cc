// Compiled with -ffp-contract=off (model/CMakeLists.txt): d * q + m must round
// twice, as in llama.cpp and gguf-py, not once as a fused multiply-add would.
#include "model/quant_blocks.h"

#include <cstring>

namespace shardlm {
namespace {

uint16_t LoadU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

}  // namespace

BlockLayout BlockLayoutOf(BlockFormat format) {
  switch (format) {
    case BlockFormat::kNone:
      return {1, 0};
    case BlockFormat::kQ8_0:
      return {32, 34};
    case BlockFormat::kQ4_0:
      return {32, 18};
    case BlockFormat::kQ4_1:
      return {32, 20};
  }
  return {1, 0};
}

const char* BlockFormatName(BlockFormat format) {
  switch (format) {
    case BlockFormat::kNone:
      return "none";
    case BlockFormat::kQ8_0:
      return "Q8_0";
    case BlockFormat::kQ4_0:
      return "Q4_0";
    case BlockFormat::kQ4_1:
      return "Q4_1";
  }
  return "?";
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400) == 0);
    bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((mant & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

float Bf16ToFloat32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

void DequantizeBlocks(BlockFormat format, const uint8_t* src, int64_t n, float* out) {
  const BlockLayout layout = BlockLayoutOf(format);
  const int64_t blocks = n / layout.elements;
  for (int64_t b = 0; b < blocks; ++b, src += layout.bytes, out += layout.elements) {
    const float d = HalfToFloat(LoadU16(src));
    switch (format) {
      case BlockFormat::kQ8_0: {
        const int8_t* q = reinterpret_cast<const int8_t*>(src + 2);
        for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(q[j]) * d;
        break;
      }
      case BlockFormat::kQ4_0: {
        const uint8_t* qs = src + 2;
        for (int j = 0; j < 16; ++j) {
          out[j] = static_cast<float>((qs[j] & 0x0f) - 8) * d;
          out[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
        }
        break;
      }
      case BlockFormat::kQ4_1: {
        const float m = HalfToFloat(LoadU16(src + 2));
        const uint8_t* qs = src + 4;
        for (int j = 0; j < 16; ++j) {
          out[j] = static_cast<float>(qs[j] & 0x0f) * d + m;
          out[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
        }
        break;
      }
      case BlockFormat::kNone:
        return;
    }
  }
}

}  // namespace shardlm
