// AVX2 + FMA decode attention (compiled with -mavx2 -mfma -mf16c; called
// only when cpu/isa.cc found them): attention_avx512.cc's three passes, 8
// lanes wide and within 16 vector registers.
//   1. scores: 8 keys at a time for every head of the pass, a d-long dot
//      product per key in its own register, summed across lanes by one
//      transposing reduction. bf16 keys are widened by a shift and a mask:
//      16 elements a load, the even ones and the odd ones, against a query
//      stored in the same order;
//   2. softmax: exp(s - max) 8 scores at a time (Exp8, the bits of the
//      AVX-512 kernel's Exp16), and their sum;
//   3. values: each value row is loaded once per pass, as many of its 8-wide
//      slices as fit in registers beside the accumulators of up to 8 query
//      heads (for d = 64 and one head, the whole row).
// Both passes over the scattered key and value rows prefetch them
// kPrefetchRows ahead through the slot list, as the AVX-512 kernel does and
// for its reason: the hardware prefetcher cannot follow them.

#include <algorithm>
#include <limits>
#include <type_traits>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/avx2_math.h"

namespace shardlm::kernels::internal {
namespace {

constexpr int64_t kMaxD = 256;
constexpr int kMaxHeadsPerPass = 8;
constexpr int64_t kPrefetchRows = 16;
constexpr int kRegisters = 16;

// 16 bf16 (bits) as f32 without a shuffle: the even-indexed elements (the low
// half of each 32-bit lane, shifted up) and the odd-indexed ones (the high
// half, the low one cleared).
inline __m256 EvenBf16(__m256i k) { return _mm256_castsi256_ps(_mm256_slli_epi32(k, 16)); }
inline __m256 OddBf16(__m256i k) {
  return _mm256_castsi256_ps(_mm256_and_si256(k, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}

// Asks for the cache lines of `bytes` bytes at p.
inline void PrefetchBytes(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) _mm_prefetch(c + off, _MM_HINT_T0);
}

// Sums each of a[0..7] across its 8 lanes: lane i of the result is the sum of
// a[i]. Three rounds of shuffles and adds instead of eight reductions.
inline __m256 Reduce8(const __m256* a) {
  __m256 t[4];
  for (int j = 0; j < 4; ++j) {
    t[j] =
        _mm256_add_ps(_mm256_unpacklo_ps(a[2 * j], a[2 * j + 1]), _mm256_unpackhi_ps(a[2 * j], a[2 * j + 1]));
  }
  __m256 u[2];
  for (int j = 0; j < 2; ++j) {
    const __m256d lo = _mm256_unpacklo_pd(_mm256_castps_pd(t[2 * j]), _mm256_castps_pd(t[2 * j + 1]));
    const __m256d hi = _mm256_unpackhi_pd(_mm256_castps_pd(t[2 * j]), _mm256_castps_pd(t[2 * j + 1]));
    u[j] = _mm256_add_ps(_mm256_castpd_ps(lo), _mm256_castpd_ps(hi));  // rows 4j..4j+3, per 128-bit half
  }
  // The two halves.
  return _mm256_add_ps(_mm256_permute2f128_ps(u[0], u[1], 0x20), _mm256_permute2f128_ps(u[0], u[1], 0x31));
}

// Whether pass 3 for G heads and C slices fits in the registers: G x C
// accumulators, the C value slices or the G broadcast probabilities
// (whichever are fewer, WeightedValues holds those), and one of the other.
constexpr bool Fits(int G, int C) { return G * C + std::min(G, C) + 1 <= kRegisters; }

// Pass 3 for heads [g0, g0 + G) and the d-slices [c, c + 8 C); head g0 + g's
// sums go to acc_out[g * d + c ...]. Every loop over heads and slices is
// unrolled early (the pragmas), so that the accumulators live in registers:
// left to the later unrolling, GCC 12 kept a copy of them in memory, stored
// on every key, in the bf16 instances.
template <int G, int C, typename T>
inline void WeightedValues(const DecodeAttentionArgs<T>& a, const float* probs, int64_t g0, int64_t c,
                           float* acc_out) {
  static_assert(Fits(G, C));
  __m256 acc[G][C];
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 16
    for (int i = 0; i < C; ++i) acc[g][i] = _mm256_setzero_ps();
  const float* p = probs + g0 * a.n;
  for (int64_t j = 0; j < a.n; ++j) {
    if (j + kPrefetchRows < a.n)
      PrefetchBytes(a.v + a.slots[j + kPrefetchRows] * a.kv_slot_stride + c, 8 * C * sizeof(T));
    const T* row = a.v + a.slots[j] * a.kv_slot_stride + c;
    if constexpr (C <= G) {
      // The value slices held, one probability broadcast at a time.
      __m256 v[C];
#pragma GCC unroll 16
      for (int i = 0; i < C; ++i) v[i] = Load8(row + 8 * i);
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g) {
        const __m256 w = _mm256_set1_ps(p[g * a.n + j]);
#pragma GCC unroll 16
        for (int i = 0; i < C; ++i) acc[g][i] = _mm256_fmadd_ps(w, v[i], acc[g][i]);
      }
    } else {
      // The probabilities held, one value slice loaded at a time.
      __m256 w[G];
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g) w[g] = _mm256_set1_ps(p[g * a.n + j]);
#pragma GCC unroll 16
      for (int i = 0; i < C; ++i) {
        const __m256 v = Load8(row + 8 * i);
#pragma GCC unroll 16
        for (int g = 0; g < G; ++g) acc[g][i] = _mm256_fmadd_ps(w[g], v, acc[g][i]);
      }
    }
  }
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 16
    for (int i = 0; i < C; ++i) _mm256_storeu_ps(acc_out + g * a.d + c + 8 * i, acc[g][i]);
}

// Pass 3 over all of d for G heads, C slices at a time: C is the largest
// power of two (up to 8) that divides d / 8 and Fits with G.
template <int G, typename T>
inline void AllValues(const DecodeAttentionArgs<T>& a, const float* probs, int64_t g0, float* acc_out) {
  const int64_t vecs = a.d / 8;
  int64_t c = 8;
  while (c > 1 && (vecs % c != 0 || !Fits(G, static_cast<int>(c)))) c /= 2;
  for (int64_t off = 0; off < a.d; off += 8 * c) {
    switch (c) {
      case 8:
        if constexpr (Fits(G, 8)) WeightedValues<G, 8>(a, probs, g0, off, acc_out);
        break;
      case 4:
        if constexpr (Fits(G, 4)) WeightedValues<G, 4>(a, probs, g0, off, acc_out);
        break;
      case 2:
        if constexpr (Fits(G, 2)) WeightedValues<G, 2>(a, probs, g0, off, acc_out);
        break;
      default:
        WeightedValues<G, 1>(a, probs, g0, off, acc_out);
        break;
    }
  }
}

// AllValues for 1 to kMaxHeadsPerPass heads: [heads - 1].
template <typename T>
using AllValuesFn = void (*)(const DecodeAttentionArgs<T>&, const float*, int64_t, float*);
template <typename T>
constexpr AllValuesFn<T> kAllValues[kMaxHeadsPerPass] = {AllValues<1, T>, AllValues<2, T>, AllValues<3, T>,
                                                         AllValues<4, T>, AllValues<5, T>, AllValues<6, T>,
                                                         AllValues<7, T>, AllValues<8, T>};

// Pass 1 for one block of 8 keys (rows[0..7]; a short block repeats its
// last row) and one scaled query q: the 8 dot products, each accumulated in
// its own register so that the 8 chains of FMAs overlap.
inline __m256 Scores8(const float* q, const float* const* rows, int64_t d) {
  __m256 part[8];
  for (int jj = 0; jj < 8; ++jj) part[jj] = _mm256_setzero_ps();
  for (int64_t i = 0; i < d; i += 8) {
    const __m256 qv = _mm256_load_ps(q + i);
#pragma GCC unroll 8
    for (int jj = 0; jj < 8; ++jj) part[jj] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(rows[jj] + i), part[jj]);
  }
  return Reduce8(part);
}

// The same in bf16: each 16 elements of a key row widened by EvenBf16 and
// OddBf16, against the unscaled query stored in that order (PrepareQuery:
// per 16 elements, the 8 even ones, then the 8 odd ones). Each product of two
// bf16 values is exact in f32, as in the AVX-512 kernel's VDPBF16PS.
inline __m256 Scores8(const float* q, const uint16_t* const* rows, int64_t d) {
  __m256 part[8];
  for (int jj = 0; jj < 8; ++jj) part[jj] = _mm256_setzero_ps();
  for (int64_t i = 0; i < d; i += 16) {
    const __m256 even = _mm256_load_ps(q + i), odd = _mm256_load_ps(q + i + 8);
#pragma GCC unroll 8
    for (int jj = 0; jj < 8; ++jj) {
      const __m256i k = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[jj] + i));
      part[jj] = _mm256_fmadd_ps(even, EvenBf16(k), part[jj]);
      part[jj] = _mm256_fmadd_ps(odd, OddBf16(k), part[jj]);
    }
  }
  return Reduce8(part);
}

// Head qg's query in f32 as Scores8 takes it at q: f32 scaled; bf16 in
// Scores8's order, unscaled (the scale is applied to the sums).
inline void PrepareQuery(const float* qg, int64_t d, float scale, float* q) {
  for (int64_t i = 0; i < d; i += 8)
    _mm256_store_ps(q + i, _mm256_mul_ps(Load8(qg + i), _mm256_set1_ps(scale)));
}
inline void PrepareQuery(const uint16_t* qg, int64_t d, float, float* q) {
  for (int64_t i = 0; i < d; i += 16) {
    const __m256i k = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qg + i));
    _mm256_store_ps(q + i, EvenBf16(k));
    _mm256_store_ps(q + i + 8, OddBf16(k));
  }
}

template <typename T>
void Decode(const DecodeAttentionArgs<T>& a) {
  const int64_t n = a.n, d = a.d;
  float* scores = a.scratch;  // [group][n]
  constexpr bool kBf16 = std::is_same_v<T, uint16_t>;
  alignas(32) float q[kMaxHeadsPerPass * kMaxD];
  alignas(32) float acc[kMaxHeadsPerPass * kMaxD];
  for (int64_t g0 = 0; g0 < a.group; g0 += kMaxHeadsPerPass) {
    const int64_t heads = std::min<int64_t>(kMaxHeadsPerPass, a.group - g0);
    float denom[kMaxHeadsPerPass];
    __m256 vmax[kMaxHeadsPerPass];
    for (int64_t g = 0; g < heads; ++g) {
      PrepareQuery(a.q + (g0 + g) * a.q_head_stride, d, a.scale, q + g * d);
      vmax[g] = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    }
    // The first rows' keys and values, which the loop's prefetch (kPrefetchRows
    // ahead) never asks for: in a step they are cold, every layer's weights
    // having streamed through the caches since this layer's last step.
    const int64_t row_bytes = d * static_cast<int64_t>(sizeof(T));
    for (int64_t j = 0; j < std::min(n, kPrefetchRows); ++j) {
      PrefetchBytes(a.k + a.slots[j] * a.kv_slot_stride, row_bytes);
      PrefetchBytes(a.v + a.slots[j] * a.kv_slot_stride, row_bytes);
    }
    // 1: scores, 8 keys at a time for every head of the pass, so each key
    // row is loaded from memory once. The value rows are asked for here too,
    // so that they are in cache by pass 3.
    for (int64_t j0 = 0; j0 < n; j0 += 8) {
      const int64_t keys = std::min<int64_t>(8, n - j0);
      const T* rows[8];
      for (int64_t jj = 0; jj < 8; ++jj)
        rows[jj] = a.k + a.slots[j0 + std::min(jj, keys - 1)] * a.kv_slot_stride;
      for (int64_t j = j0 + kPrefetchRows; j < std::min(n, j0 + 8 + kPrefetchRows); ++j) {
        PrefetchBytes(a.k + a.slots[j] * a.kv_slot_stride, row_bytes);
        PrefetchBytes(a.v + a.slots[j] * a.kv_slot_stride, row_bytes);
      }
      for (int64_t g = 0; g < heads; ++g) {
        __m256 sums = Scores8(q + g * d, rows, d);
        if constexpr (kBf16) sums = _mm256_mul_ps(sums, _mm256_set1_ps(a.scale));
        StorePart(scores + (g0 + g) * n + j0, keys, sums);
        // The lanes past a short block's keys hold its last key's score
        // again, so they leave the maximum as the block's keys make it.
        vmax[g] = _mm256_max_ps(vmax[g], sums);
      }
    }
    // 2: exp(s - max) and their sum, per head.
    for (int64_t g = 0; g < heads; ++g) {
      float* s = scores + (g0 + g) * n;
      const __m256 m = _mm256_set1_ps(HorizontalMax8(vmax[g]));
      __m256 sum = _mm256_setzero_ps();
      for (int64_t j = 0; j < n; j += 8) {
        const __m256 e = Exp8(_mm256_sub_ps(LoadPart(s + j, n - j), m));
        StorePart(s + j, n - j, e);
        // Past the end the loaded zeros' exp, left out of the sum.
        sum = _mm256_add_ps(sum, _mm256_and_ps(e, _mm256_castsi256_ps(TailMask8(n - j))));
      }
      denom[g] = HorizontalSum8(sum);
    }
    // 3: the weighted values.
    kAllValues<T>[heads - 1](a, scores, g0, acc);
    for (int64_t g = g0; g < g0 + heads; ++g) {
      const __m256 inv = _mm256_set1_ps(1.0f / denom[g - g0]);
      T* o = a.out + g * a.out_head_stride;
      for (int64_t i = 0; i < d; i += 8)
        StorePart(o + i, 8, _mm256_mul_ps(_mm256_load_ps(acc + (g - g0) * d + i), inv));
    }
  }
}

}  // namespace

void DecodeAttentionF32Avx2(const DecodeAttentionArgs<float>& a) { Decode(a); }
void DecodeAttentionBf16Avx2(const DecodeAttentionArgs<uint16_t>& a) { Decode(a); }

}  // namespace shardlm::kernels::internal
