// AVX2 + FMA element-wise loops (cpu/elementwise.h; compiled with -mavx2
// -mfma -mf16c, called only when cpu/isa.cc found them): the 8-lane twins of
// elementwise_avx512.cc, on the Exp8 and Silu8 of cpu/avx2_math.h.
//
// SiLU x up, rotary and the residual add are the AVX-512 loops' operations in
// the same order, so the two give the same bits. So does RMSNorm: its sum of
// squares keeps the AVX-512 loop's 16 partial sums, in two registers, and
// adds them up in the order _mm512_reduce_add_ps does. (Where two NaNs meet,
// x86 keeps the first operand's and GCC may order the operands either way:
// a NaN result is NaN in both, its sign and payload may differ.) Log-sum-exp
// adds its terms in an order of its own (within an ulp or two); the arg max
// is exact.
#include <cmath>
#include <limits>

#include "kernels/cpu/avx2_math.h"
#include "kernels/cpu/elementwise.h"

namespace shardlm::kernels::internal {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The first `left` floats at p, the other lanes (where fewer than 8 remain)
// set to `fill`: a maximum must not see the zeros LoadPart puts there.
inline __m256 LoadOrFill(const float* p, int64_t left, __m256 fill) {
  if (left >= 8) return _mm256_loadu_ps(p);
  const __m256i m = TailMask8(left);
  return _mm256_blendv_ps(fill, _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
}

// The bits of movemask for lanes [0, left) of a block of 8.
inline int LaneBits(int64_t left) { return left >= 8 ? 0xff : (1 << left) - 1; }

}  // namespace

void SiluMulF32Avx2(const float* g, const float* u, float* o, int64_t n) {
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 act = Silu8(LoadPart(g + i, n - i));
    StorePart(o + i, n - i, _mm256_mul_ps(act, LoadPart(u + i, n - i)));
  }
}

void SiluMulBf16Avx2(const uint16_t* g, const uint16_t* u, uint16_t* o, int64_t n) {
  for (int64_t i = 0; i < n; i += 8) {
    // The activation rounded to bf16 and widened again, then the product.
    const __m256 act = RoundBf16x8(Silu8(LoadPart(g + i, n - i)));
    StorePart(o + i, n - i, _mm256_mul_ps(act, LoadPart(u + i, n - i)));
  }
}

float LogSumExpAvx2(const float* x, int64_t n) {
  if (n <= 0) return -kInf;
  const __m256 minus_inf = _mm256_set1_ps(-kInf);
  __m256 vmax = minus_inf;
  for (int64_t i = 0; i < n; i += 8) vmax = _mm256_max_ps(vmax, LoadOrFill(x + i, n - i, minus_inf));
  const float mx = HorizontalMax8(vmax);
  if (!std::isfinite(mx)) return mx;
  const __m256 mv = _mm256_set1_ps(mx);
  // Four accumulators: each sums a quarter of the terms, all at most 1.
  __m256 s[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int j = 0; j < 4; ++j)
      s[j] = _mm256_add_ps(s[j], Exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8 * j), mv)));
  }
  for (; i < n; i += 8) {
    // Lanes past the end read as 0, whose exp(0 - mx) must not be added.
    const __m256 e = Exp8(_mm256_sub_ps(LoadPart(x + i, n - i), mv));
    s[0] = _mm256_add_ps(s[0], _mm256_and_ps(e, _mm256_castsi256_ps(TailMask8(n - i))));
  }
  const float sum = HorizontalSum8(_mm256_add_ps(_mm256_add_ps(s[0], s[1]), _mm256_add_ps(s[2], s[3])));
  return mx + std::log(sum);
}

int64_t ArgMaxAvx2(const float* x, int64_t n) {
  // The maximum, 4 vectors a step, and whether any lane was NaN; then the
  // first lane that holds the maximum.
  const __m256 minus_inf = _mm256_set1_ps(-kInf);
  __m256 m[4] = {minus_inf, minus_inf, minus_inf, minus_inf};
  __m256 nan = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int j = 0; j < 4; ++j) {
      const __m256 v = _mm256_loadu_ps(x + i + 8 * j);
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      m[j] = _mm256_max_ps(m[j], v);
    }
  }
  for (; i < n; i += 8) {
    const __m256 v = LoadOrFill(x + i, n - i, minus_inf);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    m[0] = _mm256_max_ps(m[0], v);
  }
  if (_mm256_movemask_ps(nan) != 0) return -1;
  const float mx = HorizontalMax8(_mm256_max_ps(_mm256_max_ps(m[0], m[1]), _mm256_max_ps(m[2], m[3])));
  const __m256 mv = _mm256_set1_ps(mx);
  for (i = 0; i < n; i += 8) {
    const int hit =
        _mm256_movemask_ps(_mm256_cmp_ps(LoadPart(x + i, n - i), mv, _CMP_EQ_OQ)) & LaneBits(n - i);
    if (hit != 0) return i + __builtin_ctz(hit);
  }
  return -1;  // not reached: the maximum is one of the values
}

namespace {

// The sum of squares to the AVX-512 loop's bit: x[i]^2 goes into partial sum
// i % 16, here lanes 0-7 of each block of 16 in lo and lanes 8-15 in hi. (That
// loop's tail adds 0 * 0 to the lanes past the end, which changes nothing, so
// hi skips a tail that does not reach them.) The 16 partial sums are then
// added in the order of GCC's _mm512_reduce_add_ps: the upper 8 plus the
// lower 8, of those the upper 4 plus the lower 4, lanes 0 + 2 and 1 + 3, and
// the two; which is HorizontalSum8 of hi + lo.
template <typename T>
float SumOfSquares(const T* x, int64_t n) {
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __m256 a = LoadPart(x + i, n - i);
    lo = _mm256_fmadd_ps(a, a, lo);
    if (n - i > 8) {
      const __m256 b = LoadPart(x + i + 8, n - i - 8);
      hi = _mm256_fmadd_ps(b, b, hi);
    }
  }
  return HorizontalSum8(_mm256_add_ps(hi, lo));
}

template <typename T>
void RmsNormRow(const T* x, const T* w, T* out, int64_t n, float eps) {
  const float r = 1.0f / std::sqrt(SumOfSquares(x, n) / static_cast<float>(n) + eps);
  const __m256 rv = _mm256_set1_ps(r);
  for (int64_t i = 0; i < n; i += 8) {
    // Normalised and rounded to the dtype, then scaled by the weight in it.
    const __m256 normed = AsDtype8(out, _mm256_mul_ps(LoadPart(x + i, n - i), rv));
    StorePart(out + i, n - i, _mm256_mul_ps(normed, LoadPart(w + i, n - i)));
  }
}

template <typename T>
void RotaryHeads(T* x, int64_t heads, int64_t half, const float* cos, const float* sin) {
  for (int64_t h = 0; h < heads; ++h) {
    T* lo = x + h * 2 * half;
    T* hi = lo + half;
    for (int64_t i = 0; i < half; i += 8) {
      const int64_t left = half - i;
      const __m256 x1 = LoadPart(lo + i, left), x2 = LoadPart(hi + i, left);
      const __m256 c = LoadPart(cos + i, left), s = LoadPart(sin + i, left);
      // Products rounded before the sum, as the scalar loop and ATen compute them.
      StorePart(lo + i, left, _mm256_sub_ps(_mm256_mul_ps(x1, c), _mm256_mul_ps(x2, s)));
      StorePart(hi + i, left, _mm256_add_ps(_mm256_mul_ps(x2, c), _mm256_mul_ps(x1, s)));
    }
  }
}

template <typename T>
void AddRows(T* x, const T* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 8)
    StorePart(x + i, n - i, _mm256_add_ps(LoadPart(x + i, n - i), LoadPart(y + i, n - i)));
}

}  // namespace

void RmsNormF32Avx2(const float* x, const float* w, float* out, int64_t n, float eps) {
  RmsNormRow(x, w, out, n, eps);
}
void RmsNormBf16Avx2(const uint16_t* x, const uint16_t* w, uint16_t* out, int64_t n, float eps) {
  RmsNormRow(x, w, out, n, eps);
}
void RotaryF32Avx2(float* x, int64_t heads, int64_t half, const float* cos, const float* sin) {
  RotaryHeads(x, heads, half, cos, sin);
}
void RotaryBf16Avx2(uint16_t* x, int64_t heads, int64_t half, const float* cos, const float* sin) {
  RotaryHeads(x, heads, half, cos, sin);
}
void AddF32Avx2(float* x, const float* y, int64_t n) { AddRows(x, y, n); }
void AddBf16Avx2(uint16_t* x, const uint16_t* y, int64_t n) { AddRows(x, y, n); }

}  // namespace shardlm::kernels::internal
