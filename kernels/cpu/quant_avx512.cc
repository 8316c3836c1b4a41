// The quantized products on AVX-512 VNNI (kernels/cpu/quant.h): for each panel
// of 16 output rows and each group of up to 8 activation rows, a block of 32
// k is 8 VPDPBUSD per activation row (u8 weights x s8 activations, four
// products per s32 lane), then one conversion and two FMAs apply the block's
// scales. The panel (at most a few tens of KB for the widths served) stays in
// L1 while the row groups pass over it, so a prompt chunk reads the weight
// from memory once; a decode step is one stream of the packed bytes.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/avx512_math.h"
#include "kernels/cpu/quant.h"

namespace shardlm::kernels::internal {
namespace {

constexpr int kGroupRows = 8;

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

// Rows [i0, i0 + R) of panel p.
template <typename T, BlockFormat F, int R>
void PanelRows(const QuantArgs<T>& a, int64_t p, int64_t i0) {
  const int64_t blocks = a.k / kQuantBlock, bb = QuantPanelBlockBytes(F);
  constexpr int64_t kScaleBytes = (F == BlockFormat::kQ4_1 ? 2 : 1) * kQuantPanelRows * 2;
  const uint8_t* panel = a.w + p * blocks * bb;
  const __m512 offset = _mm512_set1_ps(F == BlockFormat::kQ8_0 ? -128.0f : -8.0f);
  const __m512i low = _mm512_set1_epi8(0x0f);
  __m512 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  const int8_t* qx = a.a.qx + i0 * a.k;
  const float* dx = a.a.dx + i0 * blocks;
  const int32_t* sx = a.a.sx + i0 * blocks;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = panel + b * bb;
    const uint8_t* q = blk + kScaleBytes;
    _mm_prefetch(reinterpret_cast<const char*>(blk + 4 * bb), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(blk + 4 * bb + 64), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(blk + 4 * bb + 128), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(blk + 4 * bb + 192), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(blk + 4 * bb + 256), _MM_HINT_T0);
    __m512i dot[R];
    for (int i = 0; i < R; ++i) dot[i] = _mm512_setzero_si512();
    const int64_t kb = b * kQuantBlock;
    if constexpr (F == BlockFormat::kQ8_0) {
      for (int c = 0; c < 8; ++c) {
        const __m512i w = _mm512_loadu_si512(q + 64 * c);
        for (int i = 0; i < R; ++i)
          dot[i] = _mm512_dpbusd_epi32(dot[i], w, Bcast4(qx + i * a.k + kb + 4 * c));
      }
    } else {
      for (int c = 0; c < 4; ++c) {
        const __m512i v = _mm512_loadu_si512(q + 64 * c);
        const __m512i lo = _mm512_and_si512(v, low);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
        for (int i = 0; i < R; ++i) {
          dot[i] = _mm512_dpbusd_epi32(dot[i], lo, Bcast4(qx + i * a.k + kb + 8 * c));
          dot[i] = _mm512_dpbusd_epi32(dot[i], hi, Bcast4(qx + i * a.k + kb + 8 * c + 4));
        }
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
    if constexpr (F == BlockFormat::kQ4_1) {
      const __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32)));
      for (int i = 0; i < R; ++i) {
        const __m512 s = _mm512_set1_ps(static_cast<float>(sx[i * blocks + b]));
        const __m512 t = _mm512_fmadd_ps(m, s, _mm512_mul_ps(d, _mm512_cvtepi32_ps(dot[i])));
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
                           float* dx, int32_t* sx) {
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
      sx[i * blocks + b] = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    }
  }
}

}  // namespace shardlm::kernels::internal
