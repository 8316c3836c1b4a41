// AVX-512 element-wise loops (cpu/elementwise.h; compiled with the AVX-512
// flags, called only when cpu/isa.cc found them): SiLU x up and log-sum-exp
// on the Exp16 and Silu of cpu/avx512_math.h, RMSNorm, rotary and the residual add.
#include <cmath>
#include <limits>

#include "kernels/cpu/avx512_math.h"
#include "kernels/cpu/elementwise.h"

namespace shardlm::kernels::internal {

void SiluMulF32Avx512(const float* g, const float* u, float* o, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask16(n - i);
    const __m512 act = Silu(_mm512_maskz_loadu_ps(m, g + i));
    _mm512_mask_storeu_ps(o + i, m, _mm512_mul_ps(act, _mm512_maskz_loadu_ps(m, u + i)));
  }
}

void SiluMulBf16Avx512(const uint16_t* g, const uint16_t* u, uint16_t* o, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask16(n - i);
    // The activation rounded to bf16 and widened again, then the product.
    const __m512 act = RoundBf16(Silu(MaskLoadBf16x16(m, g + i)));
    _mm256_mask_storeu_epi16(o + i, m, ToBf16x16(_mm512_mul_ps(act, MaskLoadBf16x16(m, u + i))));
  }
}

float LogSumExpAvx512(const float* x, int64_t n) {
  if (n <= 0) return -std::numeric_limits<float>::infinity();
  __m512 vmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask16(n - i);
    vmax = _mm512_mask_max_ps(vmax, m, vmax, _mm512_maskz_loadu_ps(m, x + i));
  }
  const float mx = _mm512_reduce_max_ps(vmax);
  if (!std::isfinite(mx)) return mx;
  const __m512 mv = _mm512_set1_ps(mx);
  // Four accumulators: each sums a quarter of the terms, all at most 1.
  __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int j = 0; j < 4; ++j)
      s[j] = _mm512_add_ps(s[j], Exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16 * j), mv)));
  }
  for (; i < n; i += 16) {
    const __mmask16 m = TailMask16(n - i);
    s[0] = _mm512_mask_add_ps(s[0], m, s[0], Exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), mv)));
  }
  const float sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3])));
  return mx + std::log(sum);
}

int64_t ArgMaxAvx512(const float* x, int64_t n) {
  // The maximum, 4 vectors a step, and whether any lane was NaN; then the
  // first lane that holds the maximum.
  __m512 m[4];
  for (auto& v : m) v = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __mmask16 nan = 0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int j = 0; j < 4; ++j) {
      const __m512 v = _mm512_loadu_ps(x + i + 16 * j);
      nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      m[j] = _mm512_max_ps(m[j], v);
    }
  }
  for (; i < n; i += 16) {
    const __mmask16 k = TailMask16(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
    nan |= _mm512_mask_cmp_ps_mask(k, v, v, _CMP_UNORD_Q);
    m[0] = _mm512_mask_max_ps(m[0], k, m[0], v);
  }
  if (nan != 0) return -1;
  const float mx = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m[0], m[1]), _mm512_max_ps(m[2], m[3])));
  const __m512 mv = _mm512_set1_ps(mx);
  for (i = 0; i < n; i += 16) {
    const __mmask16 k = TailMask16(n - i);
    const __mmask16 hit = _mm512_mask_cmp_ps_mask(k, _mm512_maskz_loadu_ps(k, x + i), mv, _CMP_EQ_OQ);
    if (hit != 0) return i + __builtin_ctz(hit);
  }
  return -1;  // not reached: the maximum is one of the values
}

namespace {

// A value as the dtype holds it: f32 as is, bf16 rounded.
inline __m512 AsDtype(float*, __m512 x) { return x; }
inline __m512 AsDtype(uint16_t*, __m512 x) { return RoundBf16(x); }

template <typename T>
void RmsNormRow(const T* x, const T* w, T* out, int64_t n, float eps) {
  __m512 ss = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 v = MaskLoad(TailMask16(n - i), x + i);
    ss = _mm512_fmadd_ps(v, v, ss);
  }
  const float r = 1.0f / std::sqrt(_mm512_reduce_add_ps(ss) / static_cast<float>(n) + eps);
  const __m512 rv = _mm512_set1_ps(r);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask16(n - i);
    // Normalised and rounded to the dtype, then scaled by the weight in it.
    const __m512 normed = AsDtype(out, _mm512_mul_ps(MaskLoad(m, x + i), rv));
    MaskStore(out + i, m, _mm512_mul_ps(normed, MaskLoad(m, w + i)));
  }
}

template <typename T>
void RotaryHeads(T* x, int64_t heads, int64_t half, const float* cos, const float* sin) {
  for (int64_t h = 0; h < heads; ++h) {
    T* lo = x + h * 2 * half;
    T* hi = lo + half;
    for (int64_t i = 0; i < half; i += 16) {
      const __mmask16 m = TailMask16(half - i);
      const __m512 x1 = MaskLoad(m, lo + i), x2 = MaskLoad(m, hi + i);
      const __m512 c = _mm512_maskz_loadu_ps(m, cos + i), s = _mm512_maskz_loadu_ps(m, sin + i);
      // Products rounded before the sum, as the scalar loop and ATen compute them.
      MaskStore(lo + i, m, _mm512_sub_ps(_mm512_mul_ps(x1, c), _mm512_mul_ps(x2, s)));
      MaskStore(hi + i, m, _mm512_add_ps(_mm512_mul_ps(x2, c), _mm512_mul_ps(x1, s)));
    }
  }
}

template <typename T>
void AddRows(T* x, const T* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask16(n - i);
    MaskStore(x + i, m, _mm512_add_ps(MaskLoad(m, x + i), MaskLoad(m, y + i)));
  }
}

}  // namespace

void RmsNormF32Avx512(const float* x, const float* w, float* out, int64_t n, float eps) {
  RmsNormRow(x, w, out, n, eps);
}
void RmsNormBf16Avx512(const uint16_t* x, const uint16_t* w, uint16_t* out, int64_t n, float eps) {
  RmsNormRow(x, w, out, n, eps);
}
void RotaryF32Avx512(float* x, int64_t heads, int64_t half, const float* cos, const float* sin) {
  RotaryHeads(x, heads, half, cos, sin);
}
void RotaryBf16Avx512(uint16_t* x, int64_t heads, int64_t half, const float* cos, const float* sin) {
  RotaryHeads(x, heads, half, cos, sin);
}
void AddF32Avx512(float* x, const float* y, int64_t n) { AddRows(x, y, n); }
void AddBf16Avx512(uint16_t* x, const uint16_t* y, int64_t n) { AddRows(x, y, n); }

}  // namespace shardlm::kernels::internal
