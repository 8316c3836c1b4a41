// The quantized products on AVX-512 VNNI (kernels/cpu/quant.h): for each panel
// of 16 output rows and each group of up to 8 activation rows, a sub-block of
// 32 k is 8 VPDPBUSD per activation row (u8 weights x s8 activations, four
// products per s32 lane; 4- to 6-bit quants unpacked by a shift, an `and` and
// for the high bits an `or`), then one conversion and two or three FMAs apply
// the scales (Q6_K's two 16-k scales in integers first). The panel (at most a few tens of KB for the widths
// served) stays in L1 while the row groups pass over it, so a prompt chunk reads the weight from memory once;
// a decode step is one stream of the packed bytes. A single row's stream is
// left to the hardware prefetchers (Q4_K and Q6_K panels streamed 5-12%
// faster without prefetches 1-16 KB ahead); groups of rows, which spend
// longer on each byte, prefetch 4 KB ahead (without it the Qwen 1.5B's batch
// of 8 took 1.45x as long; docs/quantized_weights.md).
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/avx512_math.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_layout.h"

namespace shardlm::kernels::internal {
namespace {

constexpr int kGroupRows = 8;
// How far ahead of its loads a panel's stream is prefetched (groups of two
// or more rows).
constexpr int64_t kPrefetchAhead = 4096;

inline __m512i Bcast4(const int8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}

template <typename T>
inline __m512 AsDtype(__m512 v) {
  if constexpr (sizeof(T) == 2) return RoundBf16(v);
  return v;
}

// The u8 operand of quad s (k 4 s .. 4 s + 3) of the sub-block at q, for
// 16 rows (quant_layout.h).
template <int Bits>
inline __m512i Quad(const uint8_t* q, int s) {
  if constexpr (Bits == 8) {
    return _mm512_loadu_si512(q + 64 * s);
  } else {
    const __m512i low = _mm512_set1_epi8(0x0f);
    const __m512i v = _mm512_loadu_si512(q + 64 * (s / 2));
    __m512i x = s % 2 == 0 ? _mm512_and_si512(v, low) : _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
    if constexpr (Bits > 4) {
      constexpr int kHigh = Bits - 4;
      const int pos = s * kHigh % 8;
      const __m512i plane = _mm512_loadu_si512(q + 256 + 64 * (s * kHigh / 8));
      const __m512i moved = pos <= 4 ? _mm512_slli_epi16(plane, 4 - pos) : _mm512_srli_epi16(plane, pos - 4);
      // x | (moved & mask) in one instruction (truth table A | (B & C)).
      x = _mm512_ternarylogic_epi32(x, moved, _mm512_set1_epi8(kHigh == 1 ? 0x10 : 0x30), 0xF8);
    }
    return x;
  }
}

// dot[i] += quads [s0, s1) of the sub-block at q times row i's activations qx + i k.
template <int Bits, int R>
inline void Dots(const uint8_t* q, const int8_t* qx, int64_t k, int s0, int s1, __m512i dot[R]) {
  for (int s = s0; s < s1; ++s) {
    const __m512i w = Quad<Bits>(q, s);
    for (int i = 0; i < R; ++i) dot[i] = _mm512_dpbusd_epi32(dot[i], w, Bcast4(qx + i * k + 4 * s));
  }
}

inline __m512 Bytes16(const uint8_t* p, bool is_signed) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm512_cvtepi32_ps(is_signed ? _mm512_cvtepi8_epi32(v) : _mm512_cvtepu8_epi32(v));
}

// Rows [i0, i0 + R) of panel p.
template <typename T, BlockFormat F, int R>
void PanelRows(const QuantArgs<T>& a, int64_t p, int64_t i0) {
  constexpr QuantPanelLayout kL = QuantLayoutOf(F);
  constexpr int64_t kSubs = kL.unit / kQuantSubBlock, kUnitBytes = QuantUnitBytes(F);
  const int64_t units = a.k / kL.unit, blocks = a.k / kQuantBlock;
  const uint8_t* panel = a.w + p * units * kUnitBytes;
  const __m512 offset = _mm512_set1_ps(QuantOffset(F));
  __m512 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  const int8_t* qx = a.a.qx + i0 * a.k;
  const float* dx = a.a.dx + i0 * blocks;
  const int32_t* sx = a.a.sx + i0 * blocks;
  const int32_t* sx16 = a.a.sx16 + i0 * 2 * blocks;
  for (int64_t u = 0; u < units; ++u) {
    const uint8_t* unit = panel + u * kUnitBytes;
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit)));
    __m512 second = _mm512_setzero_ps();
    if constexpr (HasSecondScale(F))
      second =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + kQuantSecondScale)));
    for (int64_t sb = 0; sb < kSubs; ++sb) {
      const uint8_t* q = unit + kL.scale_bytes + sb * kL.sub_bytes;
      if constexpr (R > 1) {  // a single row streams on the hardware prefetchers alone (file comment)
        for (int64_t ahead = 0; ahead < kL.sub_bytes + (kSubs == 1 ? kL.scale_bytes : 0); ahead += 64)
          _mm_prefetch(reinterpret_cast<const char*>(q + kPrefetchAhead + ahead), _MM_HINT_T0);
      }
      const int64_t b = u * kSubs + sb;
      const int8_t* qxb = qx + b * kQuantBlock;
      __m512i dot[R], dot_hi[R];
      for (int i = 0; i < R; ++i) dot[i] = dot_hi[i] = _mm512_setzero_si512();
      if constexpr (F == BlockFormat::kQ6_K) {
        Dots<kL.bits, R>(q, qxb, a.k, 0, 4, dot);
        Dots<kL.bits, R>(q, qxb, a.k, 4, 8, dot_hi);
      } else {
        Dots<kL.bits, R>(q, qxb, a.k, 0, 8, dot);
      }
      if constexpr (F == BlockFormat::kQ4_1 || F == BlockFormat::kQ5_1) {
        for (int i = 0; i < R; ++i) {
          const __m512 s = _mm512_set1_ps(static_cast<float>(sx[i * blocks + b]));
          const __m512 t = _mm512_fmadd_ps(second, s, _mm512_mul_ps(d, _mm512_cvtepi32_ps(dot[i])));
          acc[i] = _mm512_fmadd_ps(t, _mm512_set1_ps(dx[i * blocks + b]), acc[i]);
        }
      } else if constexpr (F == BlockFormat::kQ4_K || F == BlockFormat::kQ5_K) {
        const __m512 ds = _mm512_mul_ps(d, Bytes16(unit + kQuantKScales + 16 * sb, false));
        const __m512 dm = _mm512_mul_ps(second, Bytes16(unit + kQuantKMins + 16 * sb, false));
        for (int i = 0; i < R; ++i) {
          const __m512 s = _mm512_set1_ps(static_cast<float>(sx[i * blocks + b]));
          const __m512 t = _mm512_fnmadd_ps(dm, s, _mm512_mul_ps(ds, _mm512_cvtepi32_ps(dot[i])));
          acc[i] = _mm512_fmadd_ps(t, _mm512_set1_ps(dx[i * blocks + b]), acc[i]);
        }
      } else if constexpr (F == BlockFormat::kQ6_K) {
        const __m128i* sc = reinterpret_cast<const __m128i*>(unit + kQuant6Scales + 32 * sb);
        const __m512i s0 = _mm512_cvtepi8_epi32(_mm_loadu_si128(sc));
        const __m512i s1 = _mm512_cvtepi8_epi32(_mm_loadu_si128(sc + 1));
        for (int i = 0; i < R; ++i) {
          const __m512i lo = _mm512_sub_epi32(dot[i], _mm512_set1_epi32(32 * sx16[i * 2 * blocks + 2 * b]));
          const __m512i hi =
              _mm512_sub_epi32(dot_hi[i], _mm512_set1_epi32(32 * sx16[i * 2 * blocks + 2 * b + 1]));
          const __m512i sum = _mm512_add_epi32(_mm512_mullo_epi32(s0, lo), _mm512_mullo_epi32(s1, hi));
          const __m512 t = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sum));
          acc[i] = _mm512_fmadd_ps(t, _mm512_set1_ps(dx[i * blocks + b]), acc[i]);
        }
      } else {
        for (int i = 0; i < R; ++i) {
          const __m512 s = _mm512_mul_ps(offset, _mm512_set1_ps(static_cast<float>(sx[i * blocks + b])));
          const __m512 t = _mm512_mul_ps(d, _mm512_add_ps(_mm512_cvtepi32_ps(dot[i]), s));
          acc[i] = _mm512_fmadd_ps(t, _mm512_set1_ps(dx[i * blocks + b]), acc[i]);
        }
      }
    }
  }
  const int64_t col = p * kQuantPanelRows;
  const __mmask16 mask = TailMask16(a.n - col);
  const __m512 bias = a.bias != nullptr ? MaskLoad(mask, a.bias + col) : _mm512_setzero_ps();
  for (int i = 0; i < R; ++i) {
    T* y = a.y + (i0 + i) * a.ldy + col;
    __m512 r = _mm512_add_ps(acc[i], bias);
    if (a.epilogue == QuantEpilogue::kAddTo) r = _mm512_add_ps(MaskLoad(mask, y), AsDtype<T>(r));
    MaskStore(y, mask, r);
  }
}

template <typename T, BlockFormat F>
void Panels(const QuantArgs<T>& a, int64_t p_begin, int64_t p_end) {
  for (int64_t p = p_begin; p < p_end; ++p) {
    int64_t i = 0;
    for (; i + kGroupRows <= a.m; i += kGroupRows) PanelRows<T, F, kGroupRows>(a, p, i);
    switch (a.m - i) {
      case 7:
        PanelRows<T, F, 7>(a, p, i);
        break;
      case 6:
        PanelRows<T, F, 6>(a, p, i);
        break;
      case 5:
        PanelRows<T, F, 5>(a, p, i);
        break;
      case 4:
        PanelRows<T, F, 4>(a, p, i);
        break;
      case 3:
        PanelRows<T, F, 3>(a, p, i);
        break;
      case 2:
        PanelRows<T, F, 2>(a, p, i);
        break;
      case 1:
        PanelRows<T, F, 1>(a, p, i);
        break;
      default:
        break;
    }
  }
}

template <typename T>
void Run(const QuantArgs<T>& a, int64_t p_begin, int64_t p_end) {
  switch (a.format) {
    case BlockFormat::kQ8_0:
      return Panels<T, BlockFormat::kQ8_0>(a, p_begin, p_end);
    case BlockFormat::kQ4_0:
      return Panels<T, BlockFormat::kQ4_0>(a, p_begin, p_end);
    case BlockFormat::kQ4_1:
      return Panels<T, BlockFormat::kQ4_1>(a, p_begin, p_end);
    case BlockFormat::kQ5_0:
      return Panels<T, BlockFormat::kQ5_0>(a, p_begin, p_end);
    case BlockFormat::kQ5_1:
      return Panels<T, BlockFormat::kQ5_1>(a, p_begin, p_end);
    case BlockFormat::kQ4_K:
      return Panels<T, BlockFormat::kQ4_K>(a, p_begin, p_end);
    case BlockFormat::kQ5_K:
      return Panels<T, BlockFormat::kQ5_K>(a, p_begin, p_end);
    case BlockFormat::kQ6_K:
      return Panels<T, BlockFormat::kQ6_K>(a, p_begin, p_end);
    default:  // kNone and formats without kernels: never a packed weight's format
      return;
  }
}

}  // namespace

void QuantF32Vnni(const QuantArgs<float>& a, int64_t b, int64_t e) { Run(a, b, e); }
void QuantBf16Vnni(const QuantArgs<uint16_t>& a, int64_t b, int64_t e) { Run(a, b, e); }

// Per row and block of 32: dx = max|x| / 127, q = round(x * 127 / max|x|)
// (to nearest even, as the portable loop's nearbyint), sx = sum q.
void QuantizeRowsF32Avx512(const float* x, int64_t ldx, int64_t k, int64_t begin, int64_t end, int8_t* qx,
                           float* dx, int32_t* sx, int32_t* sx16) {
  const int64_t blocks = k / kQuantBlock;
  for (int64_t i = begin; i < end; ++i) {
    for (int64_t b = 0; b < blocks; ++b) {
      const float* xb = x + i * ldx + b * kQuantBlock;
      const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
      const float d = amax / 127.0f, id = d != 0.0f ? 127.0f / amax : 0.0f;
      const __m512 s = _mm512_set1_ps(id);
      const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, s));
      const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, s));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qx + i * k + b * kQuantBlock), _mm512_cvtsepi32_epi8(q0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qx + i * k + b * kQuantBlock + 16),
                       _mm512_cvtsepi32_epi8(q1));
      dx[i * blocks + b] = d;
      const int32_t s0 = _mm512_reduce_add_epi32(q0), s1 = _mm512_reduce_add_epi32(q1);
      sx[i * blocks + b] = s0 + s1;
      sx16[i * 2 * blocks + 2 * b] = s0;
      sx16[i * 2 * blocks + 2 * b + 1] = s1;
    }
  }
}

}  // namespace shardlm::kernels::internal
