// The quantized products on AVX2 (kernels/cpu/quant.h), for CPUs without
// AVX-512 VNNI: VPMADDUBSW (u8 x s8 pairs summed into s16) then VPMADDWD
// against ones (s16 pairs into s32) stand in for VPDPBUSD. A panel's 16 rows
// are two halves of 8 (one 256-bit register each); groups of up to 4
// activation rows pass over each half.
//
// No s16 sum may saturate: Q4 nibbles (at most 15) times int8 activations (at
// most 127 in magnitude) stay under 3,810 per pair, so a whole block's 4
// chunks add up in s16 (30,480); Q8_0's stored u8 (w + 128) would not, so
// its weights go back to int8 and the sign moves onto the activations
// (|w| x sign(w) x, at most 32,512 per pair), which sums w . x itself. Every
// integer dot is exact, so each output is the same f32 value the VNNI kernel
// and the portable loop compute.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/quant.h"

namespace shardlm::kernels::internal {
namespace {

constexpr int kGroupRows = 4;

inline __m256i Bcast4(const int8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi32(v);
}

// Rows [i0, i0 + R) against rows [8 h, 8 h + 8) of panel p: out[i][r].
template <typename T, BlockFormat F, int R>
void HalfRows(const QuantArgs<T>& a, int64_t p, int h, int64_t i0, float out[][8]) {
  const int64_t blocks = a.k / kQuantBlock, bb = QuantPanelBlockBytes(F);
  constexpr int64_t kScaleBytes = (F == BlockFormat::kQ4_1 ? 2 : 1) * kQuantPanelRows * 2;
  const uint8_t* panel = a.w + p * blocks * bb;
  const __m256i low = _mm256_set1_epi8(0x0f), flip = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256 offset = _mm256_set1_ps(F == BlockFormat::kQ4_0 ? -8.0f : 0.0f);
  __m256 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps();
  const int8_t* qx = a.a.qx + i0 * a.k;
  const float* dx = a.a.dx + i0 * blocks;
  const int32_t* sx = a.a.sx + i0 * blocks;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = panel + b * bb;
    const uint8_t* q = blk + kScaleBytes + 32 * h;
    const int64_t kb = b * kQuantBlock;
    __m256i dot[R];
    if constexpr (F == BlockFormat::kQ8_0) {
      for (int i = 0; i < R; ++i) dot[i] = _mm256_setzero_si256();
      for (int c = 0; c < 8; ++c) {
        const __m256i w =
            _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * c)), flip);
        const __m256i aw = _mm256_abs_epi8(w);
        for (int i = 0; i < R; ++i) {
          const __m256i xs = _mm256_sign_epi8(Bcast4(qx + i * a.k + kb + 4 * c), w);
          dot[i] = _mm256_add_epi32(dot[i], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, xs), ones));
        }
      }
    } else {
      __m256i s16[R];
      for (int i = 0; i < R; ++i) s16[i] = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * c));
        const __m256i lo = _mm256_and_si256(v, low);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
        for (int i = 0; i < R; ++i) {
          const __m256i pl = _mm256_maddubs_epi16(lo, Bcast4(qx + i * a.k + kb + 8 * c));
          const __m256i ph = _mm256_maddubs_epi16(hi, Bcast4(qx + i * a.k + kb + 8 * c + 4));
          s16[i] = _mm256_add_epi16(s16[i], _mm256_add_epi16(pl, ph));
        }
      }
      for (int i = 0; i < R; ++i) dot[i] = _mm256_madd_epi16(s16[i], ones);
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * h)));
    if constexpr (F == BlockFormat::kQ4_1) {
      const __m256 m = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 32 + 16 * h)));
      for (int i = 0; i < R; ++i) {
        const __m256 s = _mm256_set1_ps(static_cast<float>(sx[i * blocks + b]));
        const __m256 t = _mm256_fmadd_ps(m, s, _mm256_mul_ps(d, _mm256_cvtepi32_ps(dot[i])));
        acc[i] = _mm256_fmadd_ps(t, _mm256_set1_ps(dx[i * blocks + b]), acc[i]);
      }
    } else {
      // Q8_0's dot is w . x already; Q4_0's is nibble . x, less 8 sx.
      for (int i = 0; i < R; ++i) {
        const __m256 s = _mm256_mul_ps(offset, _mm256_set1_ps(static_cast<float>(sx[i * blocks + b])));
        const __m256 t = _mm256_mul_ps(d, _mm256_add_ps(_mm256_cvtepi32_ps(dot[i]), s));
        acc[i] = _mm256_fmadd_ps(t, _mm256_set1_ps(dx[i * blocks + b]), acc[i]);
      }
    }
  }
  for (int i = 0; i < R; ++i) _mm256_storeu_ps(out[i], acc[i]);
}

// The epilogue of one half's outputs, element by element (as the portable loop).
template <typename T>
void Finish(const QuantArgs<T>& a, int64_t row, int64_t col, const float* v) {
  const int64_t cols = std::min<int64_t>(8, a.n - col);
  for (int64_t r = 0; r < cols; ++r) {
    float acc = v[r];
    if (a.bias != nullptr) acc += ToFloat(a.bias[col + r]);
    T* out = a.y + row * a.ldy + col + r;
    if (a.epilogue == QuantEpilogue::kAddTo) {
      T rounded;
      PutFloat(&rounded, acc);
      PutFloat(out, ToFloat(*out) + ToFloat(rounded));
    } else {
      PutFloat(out, acc);
    }
  }
}

template <typename T, BlockFormat F, int R>
void Group(const QuantArgs<T>& a, int64_t p, int64_t i0) {
  for (int h = 0; h < 2; ++h) {
    const int64_t col = p * kQuantPanelRows + 8 * h;
    if (col >= a.n) break;
    float out[R][8];
    HalfRows<T, F, R>(a, p, h, i0, out);
    for (int i = 0; i < R; ++i) Finish(a, i0 + i, col, out[i]);
  }
}

template <typename T, BlockFormat F>
void Panels(const QuantArgs<T>& a, int64_t p_begin, int64_t p_end) {
  for (int64_t p = p_begin; p < p_end; ++p) {
    int64_t i = 0;
    for (; i + kGroupRows <= a.m; i += kGroupRows) Group<T, F, kGroupRows>(a, p, i);
    switch (a.m - i) {
      case 3:
        Group<T, F, 3>(a, p, i);
        break;
      case 2:
        Group<T, F, 2>(a, p, i);
        break;
      case 1:
        Group<T, F, 1>(a, p, i);
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

void QuantF32Avx2(const QuantArgs<float>& a, int64_t b, int64_t e) { Run(a, b, e); }
void QuantBf16Avx2(const QuantArgs<uint16_t>& a, int64_t b, int64_t e) { Run(a, b, e); }

}  // namespace shardlm::kernels::internal
