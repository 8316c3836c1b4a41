// AVX-512 small-batch products (compiled with -mavx512f -mavx512bw
// -mavx512vl -mavx512bf16; called only when cpu/isa.cc found them).
//
// Dot-product form over the weight's rows, in register tiles of R weight rows
// x up to 8 activation rows: each 64-byte weight vector is loaded once into a
// register and multiplied into every activation row of the tile. For more
// than 8 activation rows the same R weight rows, now in L1, go through the
// next tiles of 8, so the weights are read from memory once per call whatever
// m is. f32 uses FMA; bf16 VDPBF16PS (32 products per instruction, f32
// accumulation). The R x M accumulators end in one transposing reduction per
// weight row instead of a horizontal sum per accumulator.
#include "kernels/cpu/avx512_math.h"
#include "kernels/cpu/gemv.h"

namespace shardlm::kernels::internal {
namespace {

#ifndef SHARDLM_PREFETCH
#define SHARDLM_PREFETCH 512
#endif
// How far ahead of the loads each weight row is prefetched (first tile only).
constexpr int kPrefetchBytes = SHARDLM_PREFETCH;
constexpr int kTile = 8;  // activation rows per register tile

// Weight rows per tile: R x M accumulators + R weight vectors + 1 activation
// vector stay within the 32 vector registers.
constexpr int RowsPerGroup(int m) { return m <= 4 ? 4 : 3; }

// Keeps a loaded vector in a register: without it GCC folds the load into
// every FMA that uses it, and the load ports, not the FMAs, bound the loop.
template <typename V>
inline void InRegister(V& v) {
  __asm__("" : "+v"(v));
}

template <typename T>
inline float BiasAt(const T* b, int64_t i) {
  return b != nullptr ? ToFloat(b[i]) : 0.0f;
}

// Writes the tile's results: y[i * ldy + row[r]] for r < rows, i < M.
template <int M, int R, typename T>
inline void Store(__m512 (&acc)[R][kTile], const T* bias, T* y, int64_t ldy, const int64_t* row, int rows) {
  for (int r = 0; r < R && r < rows; ++r) {
    for (int i = M; i < kTile; ++i) acc[r][i] = _mm512_setzero_ps();
    alignas(32) float s[kTile];
    _mm256_store_ps(s, Reduce8(acc[r]));
    const float b = BiasAt(bias, row[r]);
    for (int i = 0; i < M; ++i) PutFloat(y + i * ldy + row[r], s[i] + b);
  }
}

template <int M, int R, bool kPrefetch>
void F32Tile(const float* const* w, const float* x, int64_t ldx, int64_t k_len, const float* bias, float* y,
             int64_t ldy, const int64_t* row, int rows) {
  __m512 acc[R][kTile];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) acc[r][i] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= k_len; k += 16) {
    __m512 wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      if (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(w[r] + k) + kPrefetchBytes, _MM_HINT_T0);
      wv[r] = _mm512_loadu_ps(w[r] + k);
    }
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      __m512 xv = _mm512_loadu_ps(x + i * ldx + k);
      InRegister(xv);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][i] = _mm512_fmadd_ps(wv[r], xv, acc[r][i]);
    }
  }
  if (k < k_len) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (k_len - k)) - 1);
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm512_maskz_loadu_ps(mask, w[r] + k);
    for (int i = 0; i < M; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + i * ldx + k);
      for (int r = 0; r < R; ++r) acc[r][i] = _mm512_fmadd_ps(wv[r], xv, acc[r][i]);
    }
  }
  Store<M, R>(acc, bias, y, ldy, row, rows);
}

template <int M, int R, bool kPrefetch>
void Bf16Tile(const uint16_t* const* w, const uint16_t* x, int64_t ldx, int64_t k_len, const uint16_t* bias,
              uint16_t* y, int64_t ldy, const int64_t* row, int rows) {
  __m512 acc[R][kTile];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) acc[r][i] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= k_len; k += 32) {
    __m512bh wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      if (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(w[r] + k) + kPrefetchBytes, _MM_HINT_T0);
      wv[r] = (__m512bh)_mm512_loadu_si512(w[r] + k);
    }
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      __m512bh xv = (__m512bh)_mm512_loadu_si512(x + i * ldx + k);
      InRegister(xv);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][i] = _mm512_dpbf16_ps(acc[r][i], wv[r], xv);
    }
  }
  if (k < k_len) {
    const __mmask32 mask = static_cast<__mmask32>((1ull << (k_len - k)) - 1);
    __m512bh wv[R];
    for (int r = 0; r < R; ++r) wv[r] = (__m512bh)_mm512_maskz_loadu_epi16(mask, w[r] + k);
    for (int i = 0; i < M; ++i) {
      const __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(mask, x + i * ldx + k);
      for (int r = 0; r < R; ++r) acc[r][i] = _mm512_dpbf16_ps(acc[r][i], wv[r], xv);
    }
  }
  Store<M, R>(acc, bias, y, ldy, row, rows);
}

template <typename T>
using TileFn = void (*)(const T* const*, const T*, int64_t, int64_t, const T*, T*, int64_t, const int64_t*,
                        int);

// The tile kernels for R weight rows, indexed by [prefetch][M - 1].
template <int R>
struct F32Tiles {
  static constexpr TileFn<float> kFns[2][kTile] = {
      {F32Tile<1, R, false>, F32Tile<2, R, false>, F32Tile<3, R, false>, F32Tile<4, R, false>,
       F32Tile<5, R, false>, F32Tile<6, R, false>, F32Tile<7, R, false>, F32Tile<8, R, false>},
      {F32Tile<1, R, true>, F32Tile<2, R, true>, F32Tile<3, R, true>, F32Tile<4, R, true>,
       F32Tile<5, R, true>, F32Tile<6, R, true>, F32Tile<7, R, true>, F32Tile<8, R, true>}};
};
template <int R>
struct Bf16Tiles {
  static constexpr TileFn<uint16_t> kFns[2][kTile] = {
      {Bf16Tile<1, R, false>, Bf16Tile<2, R, false>, Bf16Tile<3, R, false>, Bf16Tile<4, R, false>,
       Bf16Tile<5, R, false>, Bf16Tile<6, R, false>, Bf16Tile<7, R, false>, Bf16Tile<8, R, false>},
      {Bf16Tile<1, R, true>, Bf16Tile<2, R, true>, Bf16Tile<3, R, true>, Bf16Tile<4, R, true>,
       Bf16Tile<5, R, true>, Bf16Tile<6, R, true>, Bf16Tile<7, R, true>, Bf16Tile<8, R, true>}};
};

// One group of weight rows (row[0..rows), R at most) through every tile of
// activation rows; only the first tile prefetches, the others find the rows
// in L1.
template <typename T, int R>
void Group(const GemvArgs<T>& a, const TileFn<T> (&fns)[2][kTile], const int64_t* row, int rows) {
  const T* w[R];
  for (int r = 0; r < R; ++r) w[r] = a.w + row[r < rows ? r : 0] * a.k;
  for (int64_t i0 = 0; i0 < a.m; i0 += kTile) {
    const int64_t m = a.m - i0 < kTile ? a.m - i0 : kTile;
    fns[i0 == 0][m - 1](w, a.x + i0 * a.ldx, a.ldx, a.k, a.bias, a.y + i0 * a.ldy, a.ldy, row, rows);
  }
}

// A thread's rows [n_begin, n_end) are cut into R equal runs and each group
// takes one row from every run: R weight streams far apart in memory, which
// the prefetchers follow better than R adjacent rows (41 vs 31 GB/s here).
template <typename T, int R, typename Tiles, typename OneRow>
void Rows(const GemvArgs<T>& a, int64_t n_begin, int64_t n_end) {
  const int64_t run = (n_end - n_begin) / R;
  int64_t row[R];
  for (int64_t n = n_begin; n < n_begin + run; ++n) {
    for (int r = 0; r < R; ++r) row[r] = n + r * run;
    Group<T, R>(a, Tiles::kFns, row, R);
  }
  for (int64_t n = n_begin + R * run; n < n_end; ++n) Group<T, 1>(a, OneRow::kFns, &n, 1);
}

template <typename T, template <int> class Tiles>
void Dispatch(const GemvArgs<T>& a, int64_t b, int64_t e) {
  if (RowsPerGroup(a.m < kTile ? static_cast<int>(a.m) : kTile) == 4) {
    Rows<T, 4, Tiles<4>, Tiles<1>>(a, b, e);
  } else {
    Rows<T, 3, Tiles<3>, Tiles<1>>(a, b, e);
  }
}

}  // namespace

void GemvF32Avx512(const GemvArgs<float>& a, int64_t b, int64_t e) { Dispatch<float, F32Tiles>(a, b, e); }

void GemvBf16Avx512(const GemvArgs<uint16_t>& a, int64_t b, int64_t e) {
  Dispatch<uint16_t, Bf16Tiles>(a, b, e);
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
