// AVX-512 decode attention (compiled with -mavx512f -mavx512bw -mavx512vl;
// called only when cpu/isa.cc found them). Three passes over the group's
// keys and values, all in f32 registers:
//   1. scores: 8 keys at a time for every head of the pass, a d-long dot
//      product per key in its own register, summed across lanes by one
//      transposing reduction (bf16: pairs multiplied by VDPBF16PS);
//   2. softmax: exp(s - max) 16 scores at a time (a degree-6 polynomial on
//      a range-reduced argument, within 2 ulp of expf), and their sum;
//   3. values: each value row is loaded once per pass, as many of its
//      16-wide slices as fit in registers beside the accumulators of up to 8
//      query heads (for d = 64 and up to 6 heads, the whole row).
// The key and value rows of a sequence are scattered over its blocks, each a
// few cache lines at a stride of the pool's slot size, too irregular for the
// hardware prefetcher at these lengths: both passes prefetch the rows
// kPrefetchRows ahead through the slot list (a batch-8 step's attention ran
// 2.4-4x the time its K and V bytes take to read without it).

#include <algorithm>
#include <limits>
#include <type_traits>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/avx512_math.h"

namespace shardlm::kernels::internal {
namespace {

constexpr int64_t kMaxD = 256;
constexpr int kMaxHeadsPerPass = 8;
constexpr int64_t kPrefetchRows = 16;
// Accumulator registers pass 3 may hold (of 32), the rest for the value
// slices and the broadcast probabilities.
constexpr int kAccRegisters = 24;

inline __m512 Load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 Load16(const uint16_t* p) { return LoadBf16x16(p); }

// Asks for the cache lines of `bytes` bytes at p.
inline void PrefetchBytes(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) _mm_prefetch(c + off, _MM_HINT_T0);
}

// Pass 3 for heads [g0, g0 + G) and the d-slices [c, c + 16 C); head g0 + g's
// sums go to acc_out[g * d + c ...].
template <int G, int C, typename T>
inline void WeightedValues(const DecodeAttentionArgs<T>& a, const float* probs, int64_t g0, int64_t c,
                           float* acc_out) {
  __m512 acc[G][C];
  for (int g = 0; g < G; ++g)
    for (int i = 0; i < C; ++i) acc[g][i] = _mm512_setzero_ps();
  const float* p = probs + g0 * a.n;
  for (int64_t j = 0; j < a.n; ++j) {
    if (j + kPrefetchRows < a.n)
      PrefetchBytes(a.v + a.slots[j + kPrefetchRows] * a.kv_slot_stride + c, 16 * C * sizeof(T));
    const T* row = a.v + a.slots[j] * a.kv_slot_stride + c;
    __m512 v[C];
    for (int i = 0; i < C; ++i) v[i] = Load16(row + 16 * i);
    for (int g = 0; g < G; ++g) {
      const __m512 w = _mm512_set1_ps(p[g * a.n + j]);
      for (int i = 0; i < C; ++i) acc[g][i] = _mm512_fmadd_ps(w, v[i], acc[g][i]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int i = 0; i < C; ++i) _mm512_storeu_ps(acc_out + g * a.d + c + 16 * i, acc[g][i]);
}

// Pass 3 over all of d for G heads, C slices at a time: C is the largest
// power of two (up to 8) that divides d / 16 and leaves G x C accumulators
// within kAccRegisters.
template <int G, typename T>
inline void AllValues(const DecodeAttentionArgs<T>& a, const float* probs, int64_t g0, float* acc_out) {
  const int64_t vecs = a.d / 16;
  int64_t c = 8;
  while (c > 1 && (vecs % c != 0 || G * c > kAccRegisters)) c /= 2;
  for (int64_t off = 0; off < a.d; off += 16 * c) {
    switch (c) {
      case 8:
        if constexpr (G * 8 <= kAccRegisters) WeightedValues<G, 8>(a, probs, g0, off, acc_out);
        break;
      case 4:
        if constexpr (G * 4 <= kAccRegisters) WeightedValues<G, 4>(a, probs, g0, off, acc_out);
        break;
      case 2:
        WeightedValues<G, 2>(a, probs, g0, off, acc_out);
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
template <typename T>
inline __m256 Scores8(const float* q, const T* const* rows, int64_t vecs) {
  __m512 part[8];
  for (int jj = 0; jj < 8; ++jj) part[jj] = _mm512_setzero_ps();
  for (int64_t v = 0; v < vecs; ++v) {
    const __m512 qv = _mm512_load_ps(q + 16 * v);
#pragma GCC unroll 8
    for (int jj = 0; jj < 8; ++jj) part[jj] = _mm512_fmadd_ps(qv, Load16(rows[jj] + 16 * v), part[jj]);
  }
  return Reduce8(part);
}

// Pass 1 in bf16: the query and key rows as they are stored, 32 bf16 a
// vector, multiplied in pairs by VDPBF16PS into f32 (each product of two bf16
// is exact in f32), half the instructions of widening both to f32 first. The
// scale is applied to the sums. A head size that is not a multiple of 32
// ends in a masked load whose zeros add nothing.
inline __m256 Scores8Bf16(const __m512bh* q, const uint16_t* const* rows, int64_t d) {
  __m512 part[8];
  for (int jj = 0; jj < 8; ++jj) part[jj] = _mm512_setzero_ps();
  for (int64_t i = 0; i < d; i += 32) {
    const __mmask32 m = TailMask32(d - i);
    const __m512bh qv = q[i / 32];
#pragma GCC unroll 8
    for (int jj = 0; jj < 8; ++jj)
      part[jj] = _mm512_dpbf16_ps(part[jj], qv, (__m512bh)_mm512_maskz_loadu_epi16(m, rows[jj] + i));
  }
  return Reduce8(part);
}

template <typename T>
void Decode(const DecodeAttentionArgs<T>& a) {
  const int64_t n = a.n, d = a.d, vecs = d / 16;
  float* scores = a.scratch;  // [group][n]
  alignas(64) float q[kMaxHeadsPerPass * kMaxD];
  constexpr bool kBf16 = std::is_same_v<T, uint16_t>;
  __m512bh qbf[kMaxHeadsPerPass][kMaxD / 32];  // bf16: the unscaled query rows
  alignas(64) float acc[kMaxHeadsPerPass * kMaxD];
  for (int64_t g0 = 0; g0 < a.group; g0 += kMaxHeadsPerPass) {
    const int64_t heads = std::min<int64_t>(kMaxHeadsPerPass, a.group - g0);
    float denom[kMaxHeadsPerPass];
    __m512 vmax[kMaxHeadsPerPass];
    for (int64_t g = 0; g < heads; ++g) {
      const T* qg = a.q + (g0 + g) * a.q_head_stride;
      if constexpr (kBf16) {
        for (int64_t i = 0; i < d; i += 32) {
          qbf[g][i / 32] = (__m512bh)_mm512_maskz_loadu_epi16(TailMask32(d - i), qg + i);
        }
      } else {
        for (int64_t i = 0; i < d; i += 16) {
          _mm512_store_ps(q + g * d + i, _mm512_mul_ps(Load16(qg + i), _mm512_set1_ps(a.scale)));
        }
      }
      vmax[g] = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
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
      const __mmask8 valid = static_cast<__mmask8>((1u << keys) - 1);
      for (int64_t g = 0; g < heads; ++g) {
        __m256 sums;
        if constexpr (kBf16) {
          sums = _mm256_mul_ps(Scores8Bf16(qbf[g], rows, d), _mm256_set1_ps(a.scale));
        } else {
          sums = Scores8(q + g * d, rows, vecs);
        }
        _mm256_mask_storeu_ps(scores + (g0 + g) * n + j0, valid, sums);
        vmax[g] = _mm512_mask_max_ps(vmax[g], valid, vmax[g], _mm512_castps256_ps512(sums));
      }
    }
    // 2: exp(s - max) and their sum, per head.
    for (int64_t g = 0; g < heads; ++g) {
      float* s = scores + (g0 + g) * n;
      const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(vmax[g]));
      __m512 sum = _mm512_setzero_ps();
      for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 valid = TailMask16(n - j);
        const __m512 e = Exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(valid, s + j), m));
        _mm512_mask_storeu_ps(s + j, valid, e);
        sum = _mm512_mask_add_ps(sum, valid, sum, e);
      }
      denom[g] = _mm512_reduce_add_ps(sum);
    }
    // 3: the weighted values.
    kAllValues<T>[heads - 1](a, scores, g0, acc);
    for (int64_t g = g0; g < g0 + heads; ++g) {
      const __m512 inv = _mm512_set1_ps(1.0f / denom[g - g0]);
      T* o = a.out + g * a.out_head_stride;
      for (int64_t i = 0; i < d; i += 16)
        MaskStore(o + i, TailMask16(16), _mm512_mul_ps(_mm512_load_ps(acc + (g - g0) * d + i), inv));
    }
  }
}

}  // namespace

void DecodeAttentionF32Avx512(const DecodeAttentionArgs<float>& a) { Decode(a); }
void DecodeAttentionBf16Avx512(const DecodeAttentionArgs<uint16_t>& a) { Decode(a); }

}  // namespace shardlm::kernels::internal
