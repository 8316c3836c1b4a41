// Compiled with -ffp-contract=off (model/CMakeLists.txt): d * q + m must round
// twice, as in llama.cpp and gguf-py, not once as a fused multiply-add would.
#include "formats/quant_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
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

// Q4_K and Q5_K (levels 15 and 31): each 32's step and minimum (at most 0)
// from its range; those stored as 6-bit multiples of the super-block's f16
// scales (the largest step and minimum over 63); each weight rounded to the
// nearest level of its 32's stored step and minimum. Plain min/max, not
// ggml's search for the scales that minimise the error (make_qkx2_quants).
void QuantizeQ45K(BlockFormat format, const float* x, uint8_t* b) {
  const bool q5 = format == BlockFormat::kQ5_K;
  const int levels = q5 ? 31 : 15;
  float step[8], minimum[8], max_step = 0.0f, max_minimum = 0.0f;
  for (int j = 0; j < 8; ++j) {
    float lo = 0.0f, hi = x[32 * j];
    for (int l = 0; l < 32; ++l) {
      lo = std::min(lo, x[32 * j + l]);
      hi = std::max(hi, x[32 * j + l]);
    }
    step[j] = (hi - lo) / static_cast<float>(levels);
    minimum[j] = -lo;
    max_step = std::max(max_step, step[j]);
    max_minimum = std::max(max_minimum, minimum[j]);
  }
  const uint16_t d_bits = FloatToHalf(max_step / 63.0f), dmin_bits = FloatToHalf(max_minimum / 63.0f);
  const float d = HalfToFloat(d_bits), dmin = HalfToFloat(dmin_bits);
  int sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = d > 0.0f ? std::min(63, static_cast<int>(std::lround(step[j] / d))) : 0;
    m[j] = dmin > 0.0f ? std::min(63, static_cast<int>(std::lround(minimum[j] / dmin))) : 0;
  }
  std::memset(b, 0, static_cast<size_t>(BlockLayoutOf(format).bytes));
  StoreU16(b, d_bits);
  StoreU16(b + 2, dmin_bits);
  uint8_t* s = b + 4;  // ScaleMinK's packing, inverted
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
    s[j + 4] = static_cast<uint8_t>((m[j] & 63) | (m[j + 4] >> 4) << 6);
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0f) | (m[j + 4] & 0x0f) << 4);
  }
  uint8_t* qh = b + 16;
  uint8_t* qs = b + (q5 ? 48 : 16);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32, l = e % 32;
    const float step_j = d * static_cast<float>(sc[j]), min_j = dmin * static_cast<float>(m[j]);
    int q = step_j > 0.0f ? static_cast<int>(std::lround((x[e] + min_j) / step_j)) : 0;
    q = std::clamp(q, 0, levels);
    qs[(e / 64) * 32 + l] = static_cast<uint8_t>(qs[(e / 64) * 32 + l] | (q & 0x0f) << (4 * (j % 2)));
    if (q5) qh[l] = static_cast<uint8_t>(qh[l] | ((q >> 4) & 1) << j);
  }
}

// Q6_K: each 16's step its largest magnitude over 31, stored as an int8
// multiple of the super-block's f16 d (the largest step over 127); each
// weight rounded to the nearest of -32..31 steps.
void QuantizeQ6K(const float* x, uint8_t* b) {
  float step[16], max_step = 0.0f;
  for (int s = 0; s < 16; ++s) {
    float amax = 0.0f;
    for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * s + l]));
    step[s] = amax / 31.0f;
    max_step = std::max(max_step, step[s]);
  }
  const uint16_t d_bits = FloatToHalf(max_step / 127.0f);
  const float d = HalfToFloat(d_bits);
  std::memset(b, 0, 210);
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  int sc[16];
  for (int s = 0; s < 16; ++s) {
    sc[s] = d > 0.0f ? std::min(127, static_cast<int>(std::lround(step[s] / d))) : 0;
    b[192 + s] = static_cast<uint8_t>(static_cast<int8_t>(sc[s]));
  }
  StoreU16(b + 208, d_bits);
  for (int e = 0; e < 256; ++e) {
    const float step_s = d * static_cast<float>(sc[e / 16]);
    const int q = std::clamp(step_s > 0.0f ? static_cast<int>(std::lround(x[e] / step_s)) : 0, -32, 31) + 32;
    const int half = e / 128, within = e % 128;
    uint8_t& low = ql[half * 64 + within % 64];
    uint8_t& high = qh[half * 32 + within % 32];
    low = static_cast<uint8_t>(low | (q & 0x0f) << (4 * (within / 64)));
    high = static_cast<uint8_t>(high | ((q >> 4) & 3) << (2 * (within / 32)));
  }
}

// Q8_0, Q4_0, Q4_1: f16 d (Q4_1: and f16 m), then the quants.
void DequantizeLegacy(BlockFormat format, const uint8_t* src, float* out) {
  const float d = HalfToFloat(LoadU16(src));
  if (format == BlockFormat::kQ8_0) {
    const int8_t* q = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(q[j]) * d;
  } else if (format == BlockFormat::kQ4_0) {
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      out[j] = static_cast<float>((qs[j] & 0x0f) - 8) * d;
      out[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
  } else {
    const float m = HalfToFloat(LoadU16(src + 2));
    const uint8_t* qs = src + 4;
    for (int j = 0; j < 16; ++j) {
      out[j] = static_cast<float>(qs[j] & 0x0f) * d + m;
      out[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
    }
  }
}

// Q5_0: f16 d, u32 qh, qs[16]: x = d * (q - 16). Q5_1: f16 d, f16 m, u32 qh, qs[16]: x = d * q + m.
// The fifth bit of weight j is bit j of qh.
void DequantizeQ5(BlockFormat format, const uint8_t* src, float* out) {
  const bool q51 = format == BlockFormat::kQ5_1;
  const float d = HalfToFloat(LoadU16(src));
  const float m = q51 ? HalfToFloat(LoadU16(src + 2)) : 0.0f;
  const uint8_t* p = src + (q51 ? 4 : 2);
  const uint32_t qh = static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                      static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
  const uint8_t* qs = p + 4;
  for (int j = 0; j < 32; ++j) {
    const int low = j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4;
    const int q = low | static_cast<int>((qh >> j) & 1u) << 4;
    out[j] = q51 ? static_cast<float>(q) * d + m : d * static_cast<float>(q - 16);
  }
}

// Q2_K: scales[16] (low nibble scale, high nibble min of each 16 weights), qs[64] (2 bits),
// f16 d, f16 dmin: x = (d * sc) * q - (dmin * m).
void DequantizeQ2K(const uint8_t* src, float* out) {
  const uint8_t* scales = src;
  const uint8_t* qs = src + 16;
  const float d = HalfToFloat(LoadU16(src + 80)), dmin = HalfToFloat(LoadU16(src + 82));
  for (int e = 0; e < 256; ++e) {
    const int half = e / 128, shift = (e % 128) / 32 * 2, l = e % 32, sub = e / 16;
    const float dl = d * static_cast<float>(scales[sub] & 0x0f);
    const float ml = dmin * static_cast<float>(scales[sub] >> 4);
    out[e] = dl * static_cast<float>((qs[half * 32 + l] >> shift) & 3) - ml;
  }
}

// Q3_K: hmask[32] (the third bit, set meaning no -4), qs[64] (2 bits), scales[12] (sixteen
// 6-bit scales, offset 32), f16 d: x = (d * (sc - 32)) * (q - 4 * !h).
void DequantizeQ3K(const uint8_t* src, float* out) {
  const uint8_t* hmask = src;
  const uint8_t* qs = src + 32;
  const uint8_t* s = src + 96;
  const float d = HalfToFloat(LoadU16(src + 108));
  for (int e = 0; e < 256; ++e) {
    const int sub = e / 16;
    const int low = (s[sub % 8] >> (4 * (sub / 8))) & 0x0f, high = (s[8 + sub % 4] >> (2 * (sub / 4))) & 3;
    const float dl = d * static_cast<float>(static_cast<int8_t>(low | high << 4) - 32);
    const int half = e / 128, shift = (e % 128) / 32 * 2, l = e % 32;
    const int ql = (qs[half * 32 + l] >> shift) & 3, h = (hmask[l] >> (e / 32)) & 1;
    out[e] = dl * static_cast<float>(ql - ((h ^ 1) << 2));
  }
}

// Q4_K and Q5_K's eight 6-bit scales and mins of 32 weights each, packed in 12 bytes.
void ScaleMinK(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 2) & 0x30);
    *m = (s[j + 4] >> 4) | ((s[j] >> 2) & 0x30);
  }
}

// Q4_K: f16 d, f16 dmin, scales[12], qs[128]; Q5_K adds qh[32] before qs (the fifth bit of
// weight e is bit e / 32 of qh[e % 32]): x = (d * sc) * q - (dmin * m).
void DequantizeQ45K(BlockFormat format, const uint8_t* src, float* out) {
  const bool q5 = format == BlockFormat::kQ5_K;
  const float d = HalfToFloat(LoadU16(src)), dmin = HalfToFloat(LoadU16(src + 2));
  const uint8_t* scales = src + 4;
  const uint8_t* qh = src + 16;
  const uint8_t* qs = src + (q5 ? 48 : 16);
  for (int e = 0; e < 256; ++e) {
    const int sub = e / 32, l = e % 32;
    int sc = 0, m = 0;
    ScaleMinK(scales, sub, &sc, &m);
    int q = (qs[(e / 64) * 32 + l] >> (4 * (sub % 2))) & 0x0f;
    if (q5) q |= ((qh[l] >> sub) & 1) << 4;
    out[e] = (d * static_cast<float>(sc)) * static_cast<float>(q) - dmin * static_cast<float>(m);
  }
}

// Q6_K: ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16] (of 16 weights each), f16 d:
// x = (d * sc) * (q - 32).
void DequantizeQ6K(const uint8_t* src, float* out) {
  const uint8_t* ql = src;
  const uint8_t* qh = src + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(src + 192);
  const float d = HalfToFloat(LoadU16(src + 208));
  for (int e = 0; e < 256; ++e) {
    const int half = e / 128, within = e % 128;
    const int low = (ql[half * 64 + within % 64] >> (4 * (within / 64))) & 0x0f;
    const int high = (qh[half * 32 + within % 32] >> (2 * (within / 32))) & 3;
    out[e] = (d * static_cast<float>(scales[e / 16])) * static_cast<float>((low | high << 4) - 32);
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
      case BlockFormat::kQ4_K:
      case BlockFormat::kQ5_K:
        QuantizeQ45K(format, x, dst);
        break;
      case BlockFormat::kQ6_K:
        QuantizeQ6K(x, dst);
        break;
      default:  // no quantizer: Q5_0, Q5_1, Q2_K, Q3_K are only read from files
        std::abort();
    }
  }
}

std::vector<int> HalfFieldOffsets(BlockFormat format) {
  switch (format) {
    case BlockFormat::kQ4_1:
    case BlockFormat::kQ5_1:
    case BlockFormat::kQ4_K:
    case BlockFormat::kQ5_K:
      return {0, 2};
    case BlockFormat::kQ2_K:
      return {80, 82};
    case BlockFormat::kQ3_K:
      return {108};
    case BlockFormat::kQ6_K:
      return {208};
    case BlockFormat::kNone:
      return {};
    default:
      return {0};
  }
}

float HalfToFloat(uint16_t h) { return HalfBitsToFloat(h); }

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
    switch (format) {
      case BlockFormat::kQ8_0:
      case BlockFormat::kQ4_0:
      case BlockFormat::kQ4_1:
        DequantizeLegacy(format, src, out);
        break;
      case BlockFormat::kQ5_0:
      case BlockFormat::kQ5_1:
        DequantizeQ5(format, src, out);
        break;
      case BlockFormat::kQ2_K:
        DequantizeQ2K(src, out);
        break;
      case BlockFormat::kQ3_K:
        DequantizeQ3K(src, out);
        break;
      case BlockFormat::kQ4_K:
      case BlockFormat::kQ5_K:
        DequantizeQ45K(format, src, out);
        break;
      case BlockFormat::kQ6_K:
        DequantizeQ6K(src, out);
        break;
      case BlockFormat::kNone:
        return;
    }
  }
}

}  // namespace shardlm
