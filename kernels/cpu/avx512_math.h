// Vector helpers shared by the AVX-512 translation units (gemv_avx512.cc,
// attention_avx512.cc, elementwise_avx512.cc). Include only from files
// compiled with the AVX-512 flags.
#pragma once

// GCC 12's AVX-512 headers build the unpack and shuffle intrinsics on
// _mm512_undefined_ps(), which -Wuninitialized reports as a use of an
// uninitialised value once inlined (a false positive).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

namespace shardlm::kernels::internal {
namespace {

// Sums each of a[0..7] across its 16 lanes: lane i of the result is the sum
// of a[i]. Three rounds of shuffles and adds instead of eight reductions.
inline __m256 Reduce8(const __m512* a) {
  __m512 t[4];
  for (int j = 0; j < 4; ++j) {
    t[j] =
        _mm512_add_ps(_mm512_unpacklo_ps(a[2 * j], a[2 * j + 1]), _mm512_unpackhi_ps(a[2 * j], a[2 * j + 1]));
  }
  __m512 u[2];
  for (int j = 0; j < 2; ++j) {
    const __m512d lo = _mm512_unpacklo_pd(_mm512_castps_pd(t[2 * j]), _mm512_castps_pd(t[2 * j + 1]));
    const __m512d hi = _mm512_unpackhi_pd(_mm512_castps_pd(t[2 * j]), _mm512_castps_pd(t[2 * j + 1]));
    u[j] = _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));  // lane l: rows 4j..4j+3, partial
  }
  // Lanes (0, 2) and (1, 3) of each, then the two halves.
  const __m512 v =
      _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xdd));
  const __m512 w = _mm512_add_ps(_mm512_shuffle_f32x4(v, v, 0x08), _mm512_shuffle_f32x4(v, v, 0x0d));
  return _mm512_castps512_ps256(w);
}

// exp(x), 16 lanes: x = n ln2 + r with |r| <= ln2 / 2, exp(r) by its Taylor
// polynomial to degree 6 (truncation below 6e-8 relative), scaled by 2^n.
// Below -87 the result is 0 or a denormal; above 88.7, infinity.
inline __m512 Exp16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);  // ln2, high part (exact product)
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);     // ln2, low part
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// The lanes of a 16-wide block that hold data when `left` elements remain.
inline __mmask16 TailMask16(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
}
// The same for a 32-wide block of 16-bit elements.
inline __mmask32 TailMask32(int64_t left) {
  return left >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << left) - 1);
}

// 16 bf16 values (bits) to f32, and back with rounding to nearest even (as
// c10::BFloat16; NaN stays NaN).
inline __m512 LoadBf16x16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline __m512 MaskLoadBf16x16(__mmask16 m, const uint16_t* p) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline __m256i ToBf16x16(__m512 x) { return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x)); }

// The elements of a float or bf16 (bits) array that mask m selects, 16 at a
// time in f32 registers: loaded (the others read as 0), or stored (bf16
// rounded to nearest even, as ToBf16x16).
inline __m512 MaskLoad(__mmask16 m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 MaskLoad(__mmask16 m, const uint16_t* p) { return MaskLoadBf16x16(m, p); }
inline void MaskStore(float* p, __mmask16 m, __m512 v) { _mm512_mask_storeu_ps(p, m, v); }
inline void MaskStore(uint16_t* p, __mmask16 m, __m512 v) { _mm256_mask_storeu_epi16(p, m, ToBf16x16(v)); }

// bf16 widened to f32 after rounding: what a value rounded to the dtype reads back as.
inline __m512 RoundBf16(__m512 x) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(ToBf16x16(x)), 16));
}

// silu(g) = g / (1 + exp(-g)): the SiLU x up loops and the packed products'
// fused SwiGLU share it, so that fused and unfused agree to the bit.
inline __m512 Silu(__m512 g) {
  const __m512 e = Exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
  return _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

}  // namespace
}  // namespace shardlm::kernels::internal
