// Compiled with -ffp-contract=off (model/CMakeLists.txt): d * q + m must round
// twice, as in llama.cpp and gguf-py, not once as a fused multiply-add would.
#include "formats/quant_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace shardlm {
namespace {

uint16_t LoadU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

void StoreU16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xff);
  p[1] = static_cast<uint8_t>(v >> 8);
}

void QuantizeQ8_0(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  StoreU16(b, FloatToHalf(d));
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
}

void QuantizeQ4_0(const float* x, uint8_t* b) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  StoreU16(b, FloatToHalf(d));
  for (int j = 0; j < 16; ++j) {
    const int lo = std::min(15, static_cast<int>(x[j] * id + 8.5f));
    const int hi = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
    b[2 + j] = static_cast<uint8_t>(lo | hi << 4);
  }
}

void QuantizeQ4_1(const float* x, uint8_t* b) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < 32; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  const float d = (hi - lo) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  StoreU16(b, FloatToHalf(d));
  StoreU16(b + 2, FloatToHalf(lo));
  for (int j = 0; j < 16; ++j) {
    const int a = std::min(15, static_cast<int>((x[j] - lo) * id + 0.5f));
    const int c = std::min(15, static_cast<int>((x[j + 16] - lo) * id + 0.5f));
    b[4 + j] = static_cast<uint8_t>(a | c << 4);
  }
}

}  // namespace

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds past 65504: infinity
  if (abs < 0x38800000u) {                        // below 2^-14: a subnormal half, in units of 2^-24
    float v;
    std::memcpy(&v, &abs, sizeof(v));
    return sign | static_cast<uint16_t>(std::nearbyint(v * 16777216.0f));
  }
  uint32_t h = (abs >> 13) - ((127u - 15u) << 10);
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

void QuantizeBlocks(BlockFormat format, const float* src, int64_t n, uint8_t* out) {
  const BlockLayout layout = BlockLayoutOf(format);
  for (int64_t b = 0; b < n / layout.elements; ++b) {
    const float* x = src + b * layout.elements;
    uint8_t* dst = out + b * layout.bytes;
    switch (format) {
      case BlockFormat::kQ8_0:
        QuantizeQ8_0(x, dst);
        break;
      case BlockFormat::kQ4_0:
        QuantizeQ4_0(x, dst);
        break;
      case BlockFormat::kQ4_1:
        QuantizeQ4_1(x, dst);
        break;
      case BlockFormat::kNone:
        return;
    }
  }
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
