// The quantized weights' packing, activation quantization and the portable
// product loop (kernels/cpu/quant.h).
#include "kernels/cpu/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

namespace shardlm::kernels {
namespace {

// IEEE binary16 bits to f32 (exact).
float HalfBits(uint16_t h) {
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

// v rounded through T (bf16: to nearest even), as f32.
template <typename T>
float RoundTo(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return Bf16ToFloat(FloatToBf16(v));
  }
}

uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

bool HasMin(BlockFormat f) { return f == BlockFormat::kQ4_1; }
int64_t ScaleBytes(BlockFormat f) { return (HasMin(f) ? 2 : 1) * kQuantPanelRows * 2; }

// The 32 quantized values of one GGUF block as stored (Q8_0: int8 + 128 as
// u8; Q4: the nibbles), with its scale and minimum bits.
void ReadBlock(BlockFormat f, const uint8_t* b, uint8_t q[kQuantBlock], uint16_t* d, uint16_t* m) {
  *d = Load16(b);
  *m = 0;
  if (f == BlockFormat::kQ8_0) {
    for (int j = 0; j < kQuantBlock; ++j) q[j] = static_cast<uint8_t>(static_cast<int8_t>(b[2 + j]) + 128);
    return;
  }
  const uint8_t* qs = b + 2;
  if (f == BlockFormat::kQ4_1) {
    *m = Load16(b + 2);
    qs = b + 4;
  }
  for (int j = 0; j < kQuantBlock / 2; ++j) {
    q[j] = qs[j] & 0x0f;
    q[j + 16] = qs[j] >> 4;
  }
}

// The value of stored quant u with scale d and minimum m.
float Dequant(BlockFormat f, uint8_t u, float d, float m) {
  switch (f) {
    case BlockFormat::kQ8_0:
      return static_cast<float>(static_cast<int>(u) - 128) * d;
    case BlockFormat::kQ4_0:
      return static_cast<float>(static_cast<int>(u) - 8) * d;
    case BlockFormat::kQ4_1:
    default:  // kNone and formats without kernels: never a packed weight's format
      break;
  }
  return static_cast<float>(u) * d + m;
}

// Stored quant of (row r, k j) in one panel block.
uint8_t PanelQuant(BlockFormat f, const uint8_t* q, int64_t r, int64_t j) {
  if (f == BlockFormat::kQ8_0) return q[(j / 4) * 64 + 4 * r + j % 4];
  const int64_t c = j / 8, within = j % 8;
  const uint8_t byte = q[c * 64 + 4 * r + within % 4];
  return within < 4 ? (byte & 0x0f) : (byte >> 4);
}

template <typename T>
void QuantScalar(const QuantArgs<T>& a, int64_t p_begin, int64_t p_end) {
  const int64_t blocks = a.k / kQuantBlock, bb = QuantPanelBlockBytes(a.format);
  const int64_t sb = ScaleBytes(a.format);
  const float offset = a.format == BlockFormat::kQ8_0   ? -128.0f
                       : a.format == BlockFormat::kQ4_0 ? -8.0f
                                                        : 0.0f;
  for (int64_t p = p_begin; p < p_end; ++p) {
    const uint8_t* panel = a.w + p * blocks * bb;
    const int64_t rows = std::min<int64_t>(kQuantPanelRows, a.n - p * kQuantPanelRows);
    for (int64_t i = 0; i < a.m; ++i) {
      const int8_t* qx = a.a.qx + i * a.k;
      const float* dx = a.a.dx + i * blocks;
      const int32_t* sx = a.a.sx + i * blocks;
      for (int64_t r = 0; r < rows; ++r) {
        float acc = 0.0f;
        for (int64_t b = 0; b < blocks; ++b) {
          const uint8_t* blk = panel + b * bb;
          const float d = HalfBits(Load16(blk + 2 * r));
          const uint8_t* q = blk + sb;
          int32_t dot = 0;
          for (int64_t j = 0; j < kQuantBlock; ++j)
            dot += PanelQuant(a.format, q, r, j) * qx[b * kQuantBlock + j];
          float t;
          if (HasMin(a.format)) {
            const float m = HalfBits(Load16(blk + 2 * kQuantPanelRows + 2 * r));
            t = std::fma(m, static_cast<float>(sx[b]), d * static_cast<float>(dot));
          } else {
            t = d * (static_cast<float>(dot) + offset * static_cast<float>(sx[b]));
          }
          acc = std::fma(t, dx[b], acc);
        }
        const int64_t o = p * kQuantPanelRows + r;
        if (a.bias != nullptr) acc += ToFloat(a.bias[o]);
        T* out = a.y + i * a.ldy + o;
        if (a.epilogue == QuantEpilogue::kAddTo) {
          PutFloat(out, ToFloat(*out) + RoundTo<T>(acc));
        } else {
          PutFloat(out, acc);
        }
      }
    }
  }
}

}  // namespace

int64_t QuantPanelBlockBytes(BlockFormat f) { return ScaleBytes(f) + (f == BlockFormat::kQ8_0 ? 512 : 256); }

int64_t QuantPackedBytes(BlockFormat f, int64_t n, int64_t k) {
  const int64_t panels = (n + kQuantPanelRows - 1) / kQuantPanelRows;
  return panels * (k / kQuantBlock) * QuantPanelBlockBytes(f);
}

void PackQuantWeight(BlockFormat f, const uint8_t* rows, int64_t n, int64_t k, uint8_t* out) {
  const int64_t blocks = k / kQuantBlock, gb = BlockLayoutOf(f).bytes, bb = QuantPanelBlockBytes(f);
  const int64_t sb = ScaleBytes(f);
  std::memset(out, 0, static_cast<size_t>(QuantPackedBytes(f, n, k)));
  for (int64_t o = 0; o < n; ++o) {
    const int64_t p = o / kQuantPanelRows, r = o % kQuantPanelRows;
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t q[kQuantBlock];
      uint16_t d, m;
      ReadBlock(f, rows + (o * blocks + b) * gb, q, &d, &m);
      uint8_t* blk = out + (p * blocks + b) * bb;
      std::memcpy(blk + 2 * r, &d, 2);
      if (HasMin(f)) std::memcpy(blk + 2 * kQuantPanelRows + 2 * r, &m, 2);
      uint8_t* qs = blk + sb;
      for (int64_t j = 0; j < kQuantBlock; ++j) {
        if (f == BlockFormat::kQ8_0) {
          qs[(j / 4) * 64 + 4 * r + j % 4] = q[j];
        } else {
          const int64_t c = j / 8, within = j % 8;
          qs[c * 64 + 4 * r + within % 4] |= static_cast<uint8_t>(within < 4 ? q[j] : q[j] << 4);
        }
      }
    }
  }
}

void UnpackQuantRows(BlockFormat f, const uint8_t* packed, int64_t n, int64_t k, const int64_t* rows,
                     int64_t count, float* out) {
  const int64_t blocks = k / kQuantBlock, bb = QuantPanelBlockBytes(f), sb = ScaleBytes(f);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t o = std::clamp<int64_t>(rows[i], 0, n - 1);
    const int64_t p = o / kQuantPanelRows, r = o % kQuantPanelRows;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* blk = packed + (p * blocks + b) * bb;
      const float d = HalfBits(Load16(blk + 2 * r));
      const float m = HasMin(f) ? HalfBits(Load16(blk + 2 * kQuantPanelRows + 2 * r)) : 0.0f;
      for (int64_t j = 0; j < kQuantBlock; ++j) {
        out[i * k + b * kQuantBlock + j] = Dequant(f, PanelQuant(f, blk + sb, r, j), d, m);
      }
    }
  }
}

template <typename T>
void QuantizeActivationRows(const T* x, int64_t ldx, int64_t k, int64_t begin, int64_t end, int8_t* qx,
                            float* dx, int32_t* sx) {
  if constexpr (std::is_same_v<T, float>) {
    if (ActiveIsa() == Isa::kAvx512) {
      internal::QuantizeRowsF32Avx512(x, ldx, k, begin, end, qx, dx, sx);
      return;
    }
  }
  const int64_t blocks = k / kQuantBlock;
  for (int64_t i = begin; i < end; ++i) {
    for (int64_t b = 0; b < blocks; ++b) {
      const T* xb = x + i * ldx + b * kQuantBlock;
      float amax = 0.0f;
      for (int64_t j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(ToFloat(xb[j])));
      const float d = amax / 127.0f, id = d != 0.0f ? 127.0f / amax : 0.0f;
      int32_t sum = 0;
      for (int64_t j = 0; j < kQuantBlock; ++j) {
        const int32_t q = static_cast<int32_t>(std::nearbyint(ToFloat(xb[j]) * id));
        qx[i * k + b * kQuantBlock + j] = static_cast<int8_t>(q);
        sum += q;
      }
      dx[i * blocks + b] = d;
      sx[i * blocks + b] = sum;
    }
  }
}

template void QuantizeActivationRows<float>(const float*, int64_t, int64_t, int64_t, int64_t, int8_t*, float*,
                                            int32_t*);
template void QuantizeActivationRows<uint16_t>(const uint16_t*, int64_t, int64_t, int64_t, int64_t, int8_t*,
                                               float*, int32_t*);

namespace internal {
void QuantF32Scalar(const QuantArgs<float>& a, int64_t b, int64_t e) { QuantScalar(a, b, e); }
void QuantBf16Scalar(const QuantArgs<uint16_t>& a, int64_t b, int64_t e) { QuantScalar(a, b, e); }
}  // namespace internal

bool HasAvx512Vnni() {
#if defined(__x86_64__)
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") != 0;
  }();
  return has;
#else
  return false;
#endif
}

namespace {

bool HasF16c() {
#if defined(__x86_64__)
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("f16c") != 0;
  }();
  return has;
#else
  return false;
#endif
}

}  // namespace

QuantF32Fn QuantF32(Isa isa) {
  if (isa == Isa::kAvx512 && HasAvx512Vnni()) return internal::QuantF32Vnni;
  if (isa >= Isa::kAvx2 && HasF16c()) return internal::QuantF32Avx2;
  return internal::QuantF32Scalar;
}
QuantBf16Fn QuantBf16(Isa isa) {
  if (isa == Isa::kAvx512 && HasAvx512Vnni()) return internal::QuantBf16Vnni;
  if (isa >= Isa::kAvx2 && HasF16c()) return internal::QuantBf16Avx2;
  return internal::QuantBf16Scalar;
}

}  // namespace shardlm::kernels
