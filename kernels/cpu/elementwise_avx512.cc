// AVX-512 SiLU x up and log-sum-exp (compiled with the AVX-512 flags; called
// only when cpu/isa.cc found them), on the Exp16 of cpu/avx512_math.h.
#include <cmath>
#include <limits>

#include "kernels/cpu/avx512_math.h"
#include "kernels/cpu/elementwise.h"

namespace shardlm::kernels::internal {
namespace {

inline __m512 Silu(__m512 g) {
  const __m512 e = Exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
  return _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

}  // namespace

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
    const __m512 act = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(ToBf16x16(Silu(MaskLoadBf16x16(m, g + i)))), 16));
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

}  // namespace shardlm::kernels::internal
