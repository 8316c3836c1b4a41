// The quantized weights' packing, activation quantization and the portable
// product loop (kernels/cpu/quant.h).
#include "kernels/cpu/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/quant_layout.h"

namespace shardlm::kernels {
namespace {

// v rounded through T (bf16: to nearest even), as f32.
template <typename T>
float RoundTo(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return Bf16ToFloat(FloatToBf16(v));
  }
}

// One sub-block (32 k) of panel row r against activations qx: the integer
// dot of each half of 16 k (the halves matter to Q6_K's scales only).
void SubDot(int bits, const uint8_t* q, int64_t r, const int8_t* qx, int32_t* lo, int32_t* hi) {
  *lo = *hi = 0;
  for (int64_t j = 0; j < kQuantSubBlock; ++j) (j < 16 ? *lo : *hi) += PanelQuant(bits, q, r, j) * qx[j];
}

// The scaled term of sub-block sb of the panel unit at `unit`, row r (the
// formulas in quant.h), in the SIMD kernels' order of operations.
float SubTerm(BlockFormat f, const uint8_t* unit, int64_t r, int64_t sb, int32_t lo, int32_t hi,
              const int32_t* sx, const int32_t* sx16) {
  const float d = HalfBitsToFloat(LoadHalfBits(unit + 2 * r));
  const float dot = static_cast<float>(lo + hi), s = static_cast<float>(*sx);
  switch (f) {
    case BlockFormat::kQ4_1:
    case BlockFormat::kQ5_1:
      return std::fma(HalfBitsToFloat(LoadHalfBits(unit + kQuantSecondScale + 2 * r)), s, d * dot);
    case BlockFormat::kQ4_K:
    case BlockFormat::kQ5_K: {
      const float dmin = HalfBitsToFloat(LoadHalfBits(unit + kQuantSecondScale + 2 * r));
      const float ds = d * static_cast<float>(unit[kQuantKScales + 16 * sb + r]);
      const float dm = dmin * static_cast<float>(unit[kQuantKMins + 16 * sb + r]);
      return std::fma(-dm, s, ds * dot);
    }
    case BlockFormat::kQ6_K: {
      const int32_t s0 = static_cast<int8_t>(unit[kQuant6Scales + 16 * (2 * sb) + r]);
      const int32_t s1 = static_cast<int8_t>(unit[kQuant6Scales + 16 * (2 * sb + 1) + r]);
      return d * static_cast<float>(s0 * (lo - 32 * sx16[0]) + s1 * (hi - 32 * sx16[1]));
    }
    default:  // Q8_0, Q4_0, Q5_0
      return d * (dot + QuantOffset(f) * s);
  }
}

template <typename T>
void QuantScalar(const QuantArgs<T>& a, int64_t p_begin, int64_t p_end) {
  const QuantPanelLayout l = QuantLayoutOf(a.format);
  const int64_t units = a.k / l.unit, ub = QuantUnitBytes(a.format), subs = l.unit / kQuantSubBlock;
  const int64_t blocks = a.k / kQuantBlock;
  for (int64_t p = p_begin; p < p_end; ++p) {
    const uint8_t* panel = a.w + p * units * ub;
    const int64_t rows = std::min<int64_t>(kQuantPanelRows, a.n - p * kQuantPanelRows);
    for (int64_t i = 0; i < a.m; ++i) {
      for (int64_t r = 0; r < rows; ++r) {
        float acc = 0.0f;
        for (int64_t u = 0; u < units; ++u) {
          const uint8_t* unit = panel + u * ub;
          for (int64_t sb = 0; sb < subs; ++sb) {
            const int64_t b = u * subs + sb;
            int32_t lo, hi;
            SubDot(l.bits, unit + l.scale_bytes + sb * l.sub_bytes, r, a.a.qx + i * a.k + b * kQuantBlock,
                   &lo, &hi);
            const float t = SubTerm(a.format, unit, r, sb, lo, hi, a.a.sx + i * blocks + b,
                                    a.a.sx16 + i * 2 * blocks + 2 * b);
            acc = std::fma(t, a.a.dx[i * blocks + b], acc);
          }
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

template <typename T>
void QuantizeActivationRows(const T* x, int64_t ldx, int64_t k, int64_t begin, int64_t end, int8_t* qx,
                            float* dx, int32_t* sx, int32_t* sx16) {
  // The SIMD loops give the same bytes and scales as the loop below.
  const Isa isa = ActiveIsa();
  if constexpr (std::is_same_v<T, float>) {
    if (isa == Isa::kAvx512) {
      internal::QuantizeRowsF32Avx512(x, ldx, k, begin, end, qx, dx, sx, sx16);
      return;
    }
    if (isa == Isa::kAvx2) {
      internal::QuantizeRowsF32Avx2(x, ldx, k, begin, end, qx, dx, sx, sx16);
      return;
    }
  } else {
    if (isa >= Isa::kAvx2) {  // bf16 has no AVX-512 loop: AVX2's serves both
      internal::QuantizeRowsBf16Avx2(x, ldx, k, begin, end, qx, dx, sx, sx16);
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
      int32_t half[2] = {0, 0};
      for (int64_t j = 0; j < kQuantBlock; ++j) {
        const int32_t q = static_cast<int32_t>(std::nearbyint(ToFloat(xb[j]) * id));
        qx[i * k + b * kQuantBlock + j] = static_cast<int8_t>(q);
        half[j / 16] += q;
      }
      dx[i * blocks + b] = d;
      sx[i * blocks + b] = half[0] + half[1];
      sx16[i * 2 * blocks + 2 * b] = half[0];
      sx16[i * 2 * blocks + 2 * b + 1] = half[1];
    }
  }
}

template void QuantizeActivationRows<float>(const float*, int64_t, int64_t, int64_t, int64_t, int8_t*, float*,
                                            int32_t*, int32_t*);
template void QuantizeActivationRows<uint16_t>(const uint16_t*, int64_t, int64_t, int64_t, int64_t, int8_t*,
                                               float*, int32_t*, int32_t*);

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
