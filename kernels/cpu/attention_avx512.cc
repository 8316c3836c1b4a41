// AVX-512 decode attention (compiled with -mavx512f -mavx512bw -mavx512vl;
// called only when cpu/isa.cc found them). Three passes over the group's
// keys and values, all in f32 registers:
//   1. scores: for each query head, 8 keys at a time, a d-long dot product
//      per key, summed across lanes by one transposing reduction;
//   2. softmax: exp(s - max) 16 scores at a time (a degree-6 polynomial on
//      a range-reduced argument, within 2 ulp of expf), and their sum;
//   3. values: for each 16-wide slice of d, every value row is loaded once
//      and multiplied into the accumulators of up to 8 query heads.

#include <algorithm>
#include <limits>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/avx512_math.h"

namespace shardlm::kernels::internal {
namespace {

constexpr int64_t kMaxD = 256;
constexpr int kMaxHeadsPerPass = 8;

inline __m512 Load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 Load16(const uint16_t* p) { return LoadBf16x16(p); }

// Pass 3 for heads [g0, g0 + G) and the d-slice [c, c + 16); head g0 + g's
// sums go to acc_out[g * d + c ...].
template <int G, typename T>
inline void WeightedValues(const DecodeAttentionArgs<T>& a, const float* probs, int64_t g0, int64_t c,
                           float* acc_out) {
  __m512 acc[G];
  for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
  for (int64_t j = 0; j < a.n; ++j) {
    const __m512 v = Load16(a.v + a.slots[j] * a.kv_slot_stride + c);
    for (int g = 0; g < G; ++g)
      acc[g] = _mm512_fmadd_ps(_mm512_set1_ps(probs[(g0 + g) * a.n + j]), v, acc[g]);
  }
  for (int g = 0; g < G; ++g) _mm512_storeu_ps(acc_out + g * a.d + c, acc[g]);
}

template <typename T>
void Decode(const DecodeAttentionArgs<T>& a) {
  const int64_t n = a.n, d = a.d, vecs = d / 16;
  float* scores = a.scratch;  // [group][n]
  alignas(64) float q[kMaxD];
  alignas(64) float acc[kMaxHeadsPerPass * kMaxD];
  for (int64_t g0 = 0; g0 < a.group; g0 += kMaxHeadsPerPass) {
    const int64_t heads = std::min<int64_t>(kMaxHeadsPerPass, a.group - g0);
    float denom[kMaxHeadsPerPass];
    // 1 and 2: scores, then exp(s - max) and their sum, one head at a time.
    for (int64_t g = g0; g < g0 + heads; ++g) {
      const T* qg = a.q + g * a.q_head_stride;
      for (int64_t i = 0; i < d; i += 16) {
        _mm512_store_ps(q + i, _mm512_mul_ps(Load16(qg + i), _mm512_set1_ps(a.scale)));
      }
      float* s = scores + g * n;
      __m512 vmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
      for (int64_t j0 = 0; j0 < n; j0 += 8) {
        const int64_t keys = std::min<int64_t>(8, n - j0);
        __m512 part[8];
        for (int jj = 0; jj < 8; ++jj) {
          part[jj] = _mm512_setzero_ps();
          if (jj >= keys) continue;
          const T* kr = a.k + a.slots[j0 + jj] * a.kv_slot_stride;
          for (int64_t v = 0; v < vecs; ++v)
            part[jj] = _mm512_fmadd_ps(_mm512_load_ps(q + 16 * v), Load16(kr + 16 * v), part[jj]);
        }
        const __m256 sums = Reduce8(part);
        const __mmask8 valid = static_cast<__mmask8>((1u << keys) - 1);
        _mm256_mask_storeu_ps(s + j0, valid, sums);
        vmax = _mm512_mask_max_ps(vmax, valid, vmax, _mm512_castps256_ps512(sums));
      }
      const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
      __m512 sum = _mm512_setzero_ps();
      for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 valid = TailMask16(n - j);
        const __m512 e = Exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(valid, s + j), m));
        _mm512_mask_storeu_ps(s + j, valid, e);
        sum = _mm512_mask_add_ps(sum, valid, sum, e);
      }
      denom[g - g0] = _mm512_reduce_add_ps(sum);
    }
    // 3: the weighted values, each value row loaded once per 16-wide slice.
    for (int64_t c = 0; c < d; c += 16) {
      switch (heads) {
        case 1:
          WeightedValues<1>(a, scores, g0, c, acc);
          break;
        case 2:
          WeightedValues<2>(a, scores, g0, c, acc);
          break;
        case 3:
          WeightedValues<3>(a, scores, g0, c, acc);
          break;
        case 4:
          WeightedValues<4>(a, scores, g0, c, acc);
          break;
        case 5:
          WeightedValues<5>(a, scores, g0, c, acc);
          break;
        case 6:
          WeightedValues<6>(a, scores, g0, c, acc);
          break;
        case 7:
          WeightedValues<7>(a, scores, g0, c, acc);
          break;
        default:
          WeightedValues<8>(a, scores, g0, c, acc);
          break;
      }
    }
    for (int64_t g = g0; g < g0 + heads; ++g) {
      const float inv = 1.0f / denom[g - g0];
      T* o = a.out + g * a.out_head_stride;
      for (int64_t i = 0; i < d; ++i) PutFloat(o + i, acc[(g - g0) * d + i] * inv);
    }
  }
}

}  // namespace

void DecodeAttentionF32Avx512(const DecodeAttentionArgs<float>& a) { Decode(a); }
void DecodeAttentionBf16Avx512(const DecodeAttentionArgs<uint16_t>& a) { Decode(a); }

}  // namespace shardlm::kernels::internal
