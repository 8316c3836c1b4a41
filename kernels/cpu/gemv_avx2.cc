// AVX2 + FMA GEMV (compiled with -mavx2 -mfma; used where AVX-512 BF16 is
// missing). Same shape as gemv_avx512.cc with 8-float vectors; bf16 is
// widened to f32 by a 16-bit shift before the FMA.
#include "kernels/cpu/avx2_math.h"
#include "kernels/cpu/gemv.h"

namespace shardlm::kernels::internal {
namespace {

constexpr int RowsPerGroup(int m) { return m <= 2 ? 4 : 2; }

template <int M, int R, typename T>
void Group(const GemvArgs<T>& a, int64_t n, int rows) {
  __m256 acc[R][M];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < M; ++i) acc[r][i] = _mm256_setzero_ps();
  const T* w[R];
  for (int r = 0; r < R; ++r) w[r] = a.w + (n + (r < rows ? r : 0)) * a.k;
  int64_t k = 0;
  for (; k + 8 <= a.k; k += 8) {
    __m256 wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wv[r] = Load8(w[r] + k);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      const __m256 xv = Load8(a.x + i * a.ldx + k);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][i] = _mm256_fmadd_ps(wv[r], xv, acc[r][i]);
    }
  }
  for (int r = 0; r < rows; ++r) {
    const float b = a.bias != nullptr ? ToFloat(a.bias[n + r]) : 0.0f;
    for (int i = 0; i < M; ++i) {
      float s = HorizontalSum8(acc[r][i]);
      for (int64_t kk = k; kk < a.k; ++kk) s += ToFloat(a.x[i * a.ldx + kk]) * ToFloat(w[r][kk]);
      PutFloat(a.y + i * a.ldy + n + r, s + b);
    }
  }
}

template <int M, typename T>
void RowsM(const GemvArgs<T>& a, int64_t n_begin, int64_t n_end) {
  constexpr int R = RowsPerGroup(M);
  int64_t n = n_begin;
  for (; n + R <= n_end; n += R) Group<M, R>(a, n, R);
  if (n < n_end) Group<M, R>(a, n, static_cast<int>(n_end - n));
}

template <typename T>
void Gemv(const GemvArgs<T>& a, int64_t b, int64_t e) {
  using Fn = void (*)(const GemvArgs<T>&, int64_t, int64_t);
  static constexpr Fn kByM[] = {RowsM<1, T>, RowsM<2, T>, RowsM<3, T>, RowsM<4, T>,
                                RowsM<5, T>, RowsM<6, T>, RowsM<7, T>, RowsM<8, T>};
  for (int64_t i0 = 0; i0 < a.m; i0 += kMaxGemvRows) {
    GemvArgs<T> part = a;
    part.x = a.x + i0 * a.ldx;
    part.y = a.y + i0 * a.ldy;
    part.m = a.m - i0 < kMaxGemvRows ? a.m - i0 : kMaxGemvRows;
    kByM[part.m - 1](part, b, e);
  }
}

}  // namespace

void GemvF32Avx2(const GemvArgs<float>& a, int64_t b, int64_t e) { Gemv(a, b, e); }
void GemvBf16Avx2(const GemvArgs<uint16_t>& a, int64_t b, int64_t e) { Gemv(a, b, e); }

float SumF32Avx2(const float* p, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(p + i));
    s1 = _mm256_add_ps(s1, _mm256_loadu_ps(p + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_loadu_ps(p + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_loadu_ps(p + i + 24));
  }
  float s = HorizontalSum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; i < n; ++i) s += p[i];
  return s;
}

}  // namespace shardlm::kernels::internal
