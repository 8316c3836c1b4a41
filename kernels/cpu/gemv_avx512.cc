// AVX-512 GEMV (compiled with -mavx512f -mavx512bw -mavx512vl -mavx512bf16;
// called only when cpu/isa.cc found them). Dot-product form over the weight's
// rows: R weight rows are streamed side by side and each 64-byte vector of
// them is multiplied into all M activation rows (which stay in L1/L2), so
// the weights are read once per call. f32 uses FMA, bf16 VDPBF16PS (32
// products per instruction, f32 accumulation).
#include <immintrin.h>

#include "kernels/cpu/gemv.h"

namespace shardlm::kernels::internal {
namespace {

// Accumulators: R rows x M activations <= 16 of the 32 vector registers.
constexpr int RowsPerGroup(int m) { return m <= 4 ? 4 : 2; }

#ifndef SHARDLM_PREFETCH
#define SHARDLM_PREFETCH 512
#endif
// Keeps a loaded vector in a register: without it GCC folds the load into
// every FMA that uses it, and the load ports, not the FMAs, bound the loop.
template <typename V>
inline void InRegister(V& v) {
  __asm__("" : "+v"(v));
}

// How far ahead of the loads each weight row is prefetched.
constexpr int kPrefetchBytes = SHARDLM_PREFETCH;

template <int M, int R>
inline void F32Group(const GemvArgs<float>& a, int64_t n, int64_t stride, int rows) {
  __m512 acc[R][M];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) acc[r][i] = _mm512_setzero_ps();
  const float* w[R];
  for (int r = 0; r < R; ++r) w[r] = a.w + (n + (r < rows ? r : 0) * stride) * a.k;
  int64_t k = 0;
  for (; k + 16 <= a.k; k += 16) {
    __m512 wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(w[r] + k) + kPrefetchBytes, _MM_HINT_T0);
      wv[r] = _mm512_loadu_ps(w[r] + k);
      InRegister(wv[r]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      __m512 xv = _mm512_loadu_ps(a.x + i * a.ldx + k);
      InRegister(xv);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][i] = _mm512_fmadd_ps(wv[r], xv, acc[r][i]);
    }
  }
  if (k < a.k) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (a.k - k)) - 1);
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm512_maskz_loadu_ps(mask, w[r] + k);
    for (int i = 0; i < M; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, a.x + i * a.ldx + k);
      for (int r = 0; r < R; ++r) acc[r][i] = _mm512_fmadd_ps(wv[r], xv, acc[r][i]);
    }
  }
  for (int r = 0; r < rows; ++r) {
    const int64_t row = n + r * stride;
    const float b = a.bias != nullptr ? a.bias[row] : 0.0f;
    for (int i = 0; i < M; ++i) a.y[i * a.ldy + row] = _mm512_reduce_add_ps(acc[r][i]) + b;
  }
}

template <int M, int R>
inline void Bf16Group(const GemvArgs<uint16_t>& a, int64_t n, int64_t stride, int rows) {
  __m512 acc[R][M];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) acc[r][i] = _mm512_setzero_ps();
  const uint16_t* w[R];
  for (int r = 0; r < R; ++r) w[r] = a.w + (n + (r < rows ? r : 0) * stride) * a.k;
  int64_t k = 0;
  for (; k + 32 <= a.k; k += 32) {
    __m512bh wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(w[r] + k) + kPrefetchBytes, _MM_HINT_T0);
      wv[r] = (__m512bh)_mm512_loadu_si512(w[r] + k);
      InRegister(wv[r]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      __m512bh xv = (__m512bh)_mm512_loadu_si512(a.x + i * a.ldx + k);
      InRegister(xv);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][i] = _mm512_dpbf16_ps(acc[r][i], wv[r], xv);
    }
  }
  if (k < a.k) {
    const __mmask32 mask = static_cast<__mmask32>((1ull << (a.k - k)) - 1);
    __m512bh wv[R];
    for (int r = 0; r < R; ++r) wv[r] = (__m512bh)_mm512_maskz_loadu_epi16(mask, w[r] + k);
    for (int i = 0; i < M; ++i) {
      const __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(mask, a.x + i * a.ldx + k);
      for (int r = 0; r < R; ++r) acc[r][i] = _mm512_dpbf16_ps(acc[r][i], wv[r], xv);
    }
  }
  for (int r = 0; r < rows; ++r) {
    const int64_t row = n + r * stride;
    const float b = a.bias != nullptr ? Bf16ToFloat(a.bias[row]) : 0.0f;
    for (int i = 0; i < M; ++i) {
      a.y[i * a.ldy + row] = FloatToBf16(_mm512_reduce_add_ps(acc[r][i]) + b);
    }
  }
}

// A thread's rows [n_begin, n_end) are cut into R equal runs and each group
// takes one row from every run: R weight streams far apart in memory, which
// the prefetchers follow better than R adjacent rows (41 vs 31 GB/s here).
template <int M, typename T, typename Group>
void Rows(const GemvArgs<T>& a, int64_t n_begin, int64_t n_end, Group group) {
  constexpr int R = RowsPerGroup(M);
  const int64_t run = (n_end - n_begin) / R;
  for (int64_t n = n_begin; n < n_begin + run; ++n) group(a, n, run, R);
  for (int64_t n = n_begin + R * run; n < n_end; ++n) group(a, n, 1, 1);
}

template <int M>
void F32M(const GemvArgs<float>& a, int64_t b, int64_t e) {
  Rows<M>(a, b, e, F32Group<M, RowsPerGroup(M)>);
}
template <int M>
void Bf16M(const GemvArgs<uint16_t>& a, int64_t b, int64_t e) {
  Rows<M>(a, b, e, Bf16Group<M, RowsPerGroup(M)>);
}

template <typename T, typename Fn>
void ByRows(const GemvArgs<T>& a, int64_t b, int64_t e, const Fn* table) {
  // Activation rows beyond kMaxGemvRows go round again (the caller avoids it).
  for (int64_t i0 = 0; i0 < a.m; i0 += kMaxGemvRows) {
    GemvArgs<T> part = a;
    part.x = a.x + i0 * a.ldx;
    part.y = a.y + i0 * a.ldy;
    part.m = a.m - i0 < kMaxGemvRows ? a.m - i0 : kMaxGemvRows;
    table[part.m - 1](part, b, e);
  }
}

}  // namespace

void GemvF32Avx512(const GemvArgs<float>& a, int64_t b, int64_t e) {
  static constexpr GemvF32Fn kByM[] = {F32M<1>, F32M<2>, F32M<3>, F32M<4>,
                                       F32M<5>, F32M<6>, F32M<7>, F32M<8>};
  ByRows(a, b, e, kByM);
}

void GemvBf16Avx512(const GemvArgs<uint16_t>& a, int64_t b, int64_t e) {
  static constexpr GemvBf16Fn kByM[] = {Bf16M<1>, Bf16M<2>, Bf16M<3>, Bf16M<4>,
                                        Bf16M<5>, Bf16M<6>, Bf16M<7>, Bf16M<8>};
  ByRows(a, b, e, kByM);
}

float SumF32Avx512(const float* p, int64_t n) {
  // Four streams a quarter of the buffer apart, each prefetched ahead as the
  // GEMV's weight rows are: the read bandwidth the kernels can reach.
  const int64_t quarter = (n / 4) & ~int64_t{15};
  const float* q[4] = {p, p + quarter, p + 2 * quarter, p + 3 * quarter};
  __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  for (int64_t i = 0; i < quarter; i += 16) {
    for (int j = 0; j < 4; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(q[j] + i) + kPrefetchBytes, _MM_HINT_T0);
      s[j] = _mm512_add_ps(s[j], _mm512_loadu_ps(q[j] + i));
    }
  }
  float total = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3])));
  for (int64_t i = 4 * quarter; i < n; ++i) total += p[i];
  return total;
}

}  // namespace shardlm::kernels::internal
