// Vector helpers shared by the AVX2 translation units (packed_avx2.cc,
// attention_avx2.cc, elementwise_avx2.cc, quant_avx2.cc, gemv_avx2.cc): the AVX2 + FMA counterparts of
// cpu/avx512_math.h, 8 lanes wide. Include only from files compiled with
// -mavx2 -mfma.
//
// Exp8 and Silu8 give the bits Exp16 and Silu give (the same range
// reduction, polynomial and rounding), so a product's fused SwiGLU and the
// element-wise loops agree across the two instruction sets; tests compare
// them lane for lane. The one exception: Exp16(+inf) is NaN, Exp8(+inf) is
// inf (silu(-inf) is NaN either way).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace shardlm::kernels::internal {
namespace {

// exp(x), 8 lanes: x = n ln2 + r with |r| <= ln2 / 2, exp(r) by its degree-6
// Taylor polynomial, scaled by 2^n in two exact halves (AVX2 has no VSCALEFPS;
// the second multiply rounds once, as VSCALEFPS does). Below -87: exp(-87);
// NaN reads as -87 (VMAXPS returns its second operand), as in Exp16.
inline __m256 Exp8(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  x = _mm256_min_ps(x, _mm256_set1_ps(88.8f));  // n <= 128: exp(88.8) is inf either way
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);  // ln2, high part (exact product)
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);     // ln2, low part
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // 2^n = 2^n1 * 2^n2, n1 = floor(n / 2), both within the normal exponents.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

// silu(g) = g / (1 + exp(-g)), as Silu in avx512_math.h.
inline __m256 Silu8(__m256 g) {
  const __m256 e = Exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

// Lanes [0, left) of 8 set (all of them from 8 up): the mask of VMASKMOVPS.
inline __m256i TailMask8(int64_t left) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const int l = left >= 8 ? 8 : static_cast<int>(left);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(l), lane);
}

// 8 bf16 values (bits) widened to f32.
inline __m256 LoadBf16x8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// 8 floats, or 8 bf16 values (bits) widened to f32.
inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 Load8(const uint16_t* p) { return LoadBf16x8(p); }

// f32 to bf16 bits rounded to nearest even (c10::BFloat16's rounding), still
// in the high half of each 32-bit lane with the low half zero. NaN becomes a
// quiet NaN of the same sign; a denormal becomes a zero of its sign, as
// VCVTNEPS2BF16 makes it (so the two instruction sets round alike).
inline __m256i RoundedBf16Bits(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i up = _mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff)));
  const __m256i rounded = _mm256_and_si256(up, _mm256_set1_epi32(static_cast<int>(0xffff0000u)));
  const __m256i quiet = _mm256_and_si256(_mm256_or_si256(u, _mm256_set1_epi32(0x00400000)),
                                         _mm256_set1_epi32(static_cast<int>(0xffff0000u)));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  const __m256i tiny =
      _mm256_cmpeq_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7f800000)), _mm256_setzero_si256());
  const __m256i sign = _mm256_and_si256(u, _mm256_set1_epi32(static_cast<int>(0x80000000u)));
  return _mm256_blendv_epi8(_mm256_blendv_epi8(rounded, sign, tiny), quiet, nan);
}

// What a value rounded to bf16 reads back as.
inline __m256 RoundBf16x8(__m256 x) { return _mm256_castsi256_ps(RoundedBf16Bits(x)); }

// 8 f32 to 8 bf16 (bits), rounded as RoundBf16x8.
inline __m128i ToBf16x8(__m256 x) {
  const __m256i b = _mm256_srli_epi32(RoundedBf16Bits(x), 16);
  return _mm_packus_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
}

// The first `left` (at most 8) elements of a float or bf16 (bits) array, in
// f32 lanes (the others read as 0), and stores of the first `left` lanes
// (bf16 rounded as RoundBf16x8). Full blocks take the unmasked paths.
inline __m256 LoadPart(const float* p, int64_t left) {
  return left >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, TailMask8(left));
}
inline __m256 LoadPart(const uint16_t* p, int64_t left) {
  if (left >= 8) return LoadBf16x8(p);
  alignas(16) uint16_t buf[8] = {};
  std::memcpy(buf, p, static_cast<size_t>(left) * sizeof(uint16_t));
  return LoadBf16x8(buf);
}
inline void StorePart(float* p, int64_t left, __m256 v) {
  if (left >= 8) {
    _mm256_storeu_ps(p, v);
  } else {
    _mm256_maskstore_ps(p, TailMask8(left), v);
  }
}
inline void StorePart(uint16_t* p, int64_t left, __m256 v) {
  const __m128i b = ToBf16x8(v);
  if (left >= 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), b);
    return;
  }
  alignas(16) uint16_t buf[8];
  _mm_store_si128(reinterpret_cast<__m128i*>(buf), b);
  std::memcpy(p, buf, static_cast<size_t>(left) * sizeof(uint16_t));
}

// A value as the element type holds it: f32 as is, bf16 rounded.
inline __m256 AsDtype8(const float*, __m256 x) { return x; }
inline __m256 AsDtype8(const uint16_t*, __m256 x) { return RoundBf16x8(x); }

// The sum and the maximum of the 8 lanes.
inline float HorizontalSum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float HorizontalMax8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace
}  // namespace shardlm::kernels::internal
