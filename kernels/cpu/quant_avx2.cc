// The quantized products on AVX2 (kernels/cpu/quant.h), for CPUs without
// AVX-512 VNNI: VPMADDUBSW (u8 x s8 pairs summed into s16) then VPMADDWD
// against ones (s16 pairs into s32) stand in for VPDPBUSD. A panel's 16 rows
// are two halves of 8 (one 256-bit register each); groups of one or two
// activation rows take both halves of each sub-block together, groups of 3
// or 4 pass over one half, then the other.
//
// No s16 sum may saturate: 4- to 6-bit quants (at most 15, 31, 63) times
// int8 activations (at most 127 in magnitude) sum in s16 over 8, 4 or 2
// quads before widening (Dots); Q8_0's stored u8 (w + 128) would not fit
// even one pair sum, so its weights go back to int8 and the sign moves onto
// the activations (|w| x sign(w) x, at most 32,512 per pair), which sums
// w . x itself. Every
// integer dot is exact, so each output is the same f32 value the VNNI kernel
// and the portable loop compute.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/avx2_math.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_layout.h"

namespace shardlm::kernels::internal {
namespace {

constexpr int kGroupRows = 4;
// Groups of up to this many rows take a panel's two halves in one pass, so
// that the panel streams once, in order (SmolLM2 Q4_1's batch-1 step, four
// interleaved rounds: 4.08-4.32 ms against 4.39-4.78 half by half; more rows
// would spill the accumulators). Software prefetch 1-4 KB ahead made that
// step 5-15% slower.
constexpr int kBothHalvesRows = 2;

inline __m256i Bcast4(const int8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi32(v);
}

// The u8 operand of quad s (k 4 s .. 4 s + 3) of the sub-block at q, for the
// 8 rows of half h (bytes 32 h .. 32 h + 31 of each 64; quant_layout.h).
template <int Bits>
inline __m256i Quad(const uint8_t* q, int h, int s) {
  const __m256i low = _mm256_set1_epi8(0x0f);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * (s / 2) + 32 * h));
  __m256i x = s % 2 == 0 ? _mm256_and_si256(v, low) : _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
  if constexpr (Bits > 4) {
    constexpr int kHigh = Bits - 4;
    const int pos = s * kHigh % 8;
    const __m256i plane =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 256 + 64 * (s * kHigh / 8) + 32 * h));
    const __m256i moved = pos <= 4 ? _mm256_slli_epi16(plane, 4 - pos) : _mm256_srli_epi16(plane, pos - 4);
    x = _mm256_or_si256(x, _mm256_and_si256(moved, _mm256_set1_epi8(kHigh == 1 ? 0x10 : 0x30)));
  }
  return x;
}

// dot[i] += quads [s0, s1) of the sub-block at q (half h) times row i's
// activations. Products of up to 6-bit quants and int8 activations sum in
// s16 for as many quads as cannot saturate (4 bits: 8 quads, 30,480 at
// most; 5 bits: 4, 31,496; 6 bits: 2, 32,004), then widen to s32.
template <int Bits, int R>
inline void Dots(const uint8_t* q, int h, const int8_t* qx, int64_t k, int s0, int s1, __m256i dot[R]) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (Bits == 8) {
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
    for (int s = s0; s < s1; ++s) {
      const __m256i w =
          _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * s + 32 * h)), flip);
      const __m256i aw = _mm256_abs_epi8(w);
      for (int i = 0; i < R; ++i) {
        const __m256i xs = _mm256_sign_epi8(Bcast4(qx + i * k + 4 * s), w);
        dot[i] = _mm256_add_epi32(dot[i], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, xs), ones));
      }
    }
  } else {
    constexpr int kPerWiden = Bits == 4 ? 8 : Bits == 5 ? 4 : 2;
    for (int g = s0; g < s1; g += kPerWiden) {
      __m256i s16[R];
      for (int i = 0; i < R; ++i) s16[i] = _mm256_setzero_si256();
      for (int s = g; s < std::min(s1, g + kPerWiden); ++s) {
        const __m256i w = Quad<Bits>(q, h, s);
        for (int i = 0; i < R; ++i)
          s16[i] = _mm256_add_epi16(s16[i], _mm256_maddubs_epi16(w, Bcast4(qx + i * k + 4 * s)));
      }
      for (int i = 0; i < R; ++i) dot[i] = _mm256_add_epi32(dot[i], _mm256_madd_epi16(s16[i], ones));
    }
  }
}

inline __m256 Bytes8(const uint8_t* p, bool is_signed) {
  const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v));
}

inline __m256 Halfs8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Rows [i0, i0 + R) against the H halves from h0 of panel p (rows
// [8 h, 8 h + 8) each): out[i][8 (h - h0) + r]. With H = 2 each sub-block's
// two halves are taken together, so the panel streams once, in order.
template <typename T, BlockFormat F, int R, int H>
void HalfRows(const QuantArgs<T>& a, int64_t p, int h0, int64_t i0, float out[][8 * H]) {
  constexpr QuantPanelLayout kL = QuantLayoutOf(F);
  constexpr int64_t kSubs = kL.unit / kQuantSubBlock, kUnitBytes = QuantUnitBytes(F);
  const int64_t units = a.k / kL.unit, blocks = a.k / kQuantBlock;
  const uint8_t* panel = a.w + p * units * kUnitBytes;
  // Q8_0's dot is w . x already (the sign trick); the others' carry the offset.
  const __m256 offset = _mm256_set1_ps(F == BlockFormat::kQ8_0 ? 0.0f : QuantOffset(F));
  __m256 acc[R][H];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < H; ++j) acc[i][j] = _mm256_setzero_ps();
  const int8_t* qx = a.a.qx + i0 * a.k;
  const float* dx = a.a.dx + i0 * blocks;
  const int32_t* sx = a.a.sx + i0 * blocks;
  const int32_t* sx16 = a.a.sx16 + i0 * 2 * blocks;
  for (int64_t u = 0; u < units; ++u) {
    const uint8_t* unit = panel + u * kUnitBytes;
    // The unit's f16 scales, widened once for its sub-blocks (a K-quant has 8).
    __m256 unit_d[H], unit_second[H];
#pragma GCC unroll 2
    for (int j = 0; j < H; ++j) {
      unit_d[j] = Halfs8(unit + 16 * (h0 + j));
      unit_second[j] =
          HasSecondScale(F) ? Halfs8(unit + kQuantSecondScale + 16 * (h0 + j)) : _mm256_setzero_ps();
    }
    for (int64_t sb = 0; sb < kSubs; ++sb) {
      const uint8_t* q = unit + kL.scale_bytes + sb * kL.sub_bytes;
      const int64_t b = u * kSubs + sb;
      const int8_t* qxb = qx + b * kQuantBlock;
#pragma GCC unroll 2
      for (int j = 0; j < H; ++j) {
        const int h = h0 + j;
        const __m256 d = unit_d[j], second = unit_second[j];
        __m256i dot[R], dot_hi[R];
        for (int i = 0; i < R; ++i) dot[i] = dot_hi[i] = _mm256_setzero_si256();
        if constexpr (F == BlockFormat::kQ6_K) {
          Dots<kL.bits, R>(q, h, qxb, a.k, 0, 4, dot);
          Dots<kL.bits, R>(q, h, qxb, a.k, 4, 8, dot_hi);
        } else {
          Dots<kL.bits, R>(q, h, qxb, a.k, 0, 8, dot);
        }
        if constexpr (F == BlockFormat::kQ4_1 || F == BlockFormat::kQ5_1) {
          for (int i = 0; i < R; ++i) {
            const __m256 s = _mm256_set1_ps(static_cast<float>(sx[i * blocks + b]));
            const __m256 t = _mm256_fmadd_ps(second, s, _mm256_mul_ps(d, _mm256_cvtepi32_ps(dot[i])));
            acc[i][j] = _mm256_fmadd_ps(t, _mm256_set1_ps(dx[i * blocks + b]), acc[i][j]);
          }
        } else if constexpr (F == BlockFormat::kQ4_K || F == BlockFormat::kQ5_K) {
          const __m256 ds = _mm256_mul_ps(d, Bytes8(unit + kQuantKScales + 16 * sb + 8 * h, false));
          const __m256 dm = _mm256_mul_ps(second, Bytes8(unit + kQuantKMins + 16 * sb + 8 * h, false));
          for (int i = 0; i < R; ++i) {
            const __m256 s = _mm256_set1_ps(static_cast<float>(sx[i * blocks + b]));
            const __m256 t = _mm256_fnmadd_ps(dm, s, _mm256_mul_ps(ds, _mm256_cvtepi32_ps(dot[i])));
            acc[i][j] = _mm256_fmadd_ps(t, _mm256_set1_ps(dx[i * blocks + b]), acc[i][j]);
          }
        } else if constexpr (F == BlockFormat::kQ6_K) {
          const uint8_t* sc = unit + kQuant6Scales + 32 * sb + 8 * h;
          const __m256i s0 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc)));
          const __m256i s1 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc + 16)));
          for (int i = 0; i < R; ++i) {
            const __m256i lo = _mm256_sub_epi32(dot[i], _mm256_set1_epi32(32 * sx16[i * 2 * blocks + 2 * b]));
            const __m256i hi =
                _mm256_sub_epi32(dot_hi[i], _mm256_set1_epi32(32 * sx16[i * 2 * blocks + 2 * b + 1]));
            const __m256i sum = _mm256_add_epi32(_mm256_mullo_epi32(s0, lo), _mm256_mullo_epi32(s1, hi));
            const __m256 t = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sum));
            acc[i][j] = _mm256_fmadd_ps(t, _mm256_set1_ps(dx[i * blocks + b]), acc[i][j]);
          }
        } else {
          for (int i = 0; i < R; ++i) {
            const __m256 s = _mm256_mul_ps(offset, _mm256_set1_ps(static_cast<float>(sx[i * blocks + b])));
            const __m256 t = _mm256_mul_ps(d, _mm256_add_ps(_mm256_cvtepi32_ps(dot[i]), s));
            acc[i][j] = _mm256_fmadd_ps(t, _mm256_set1_ps(dx[i * blocks + b]), acc[i][j]);
          }
        }
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < H; ++j) _mm256_storeu_ps(out[i] + 8 * j, acc[i][j]);
}

// The epilogue of one half's outputs, element by element (as the portable loop).
template <typename T>
void Finish(const QuantArgs<T>& a, int64_t row, int64_t col, const float* v) {
  const int64_t cols = std::min<int64_t>(8, a.n - col);
  for (int64_t r = 0; r < cols; ++r) {
    float acc = v[r];
    if (a.bias != nullptr) acc += ToFloat(a.bias[col + r]);
    T* out = a.y + row * a.ldy + col + r;
    if (a.epilogue == QuantEpilogue::kAddTo) {
      T rounded;
      PutFloat(&rounded, acc);
      PutFloat(out, ToFloat(*out) + ToFloat(rounded));
    } else {
      PutFloat(out, acc);
    }
  }
}

template <typename T, BlockFormat F, int R>
void Group(const QuantArgs<T>& a, int64_t p, int64_t i0) {
  const int64_t col = p * kQuantPanelRows;
  if constexpr (R <= kBothHalvesRows) {
    // Both halves in one pass (the panel's lines in order).
    float out[R][16];
    HalfRows<T, F, R, 2>(a, p, 0, i0, out);
    for (int i = 0; i < R; ++i) {
      Finish(a, i0 + i, col, out[i]);
      if (col + 8 < a.n) Finish(a, i0 + i, col + 8, out[i] + 8);
    }
  } else {
    for (int h = 0; h < 2; ++h) {
      if (col + 8 * h >= a.n) break;
      float out[R][8];
      HalfRows<T, F, R, 1>(a, p, h, i0, out);
      for (int i = 0; i < R; ++i) Finish(a, i0 + i, col + 8 * h, out[i]);
    }
  }
}

template <typename T, BlockFormat F>
void Panels(const QuantArgs<T>& a, int64_t p_begin, int64_t p_end) {
  for (int64_t p = p_begin; p < p_end; ++p) {
    int64_t i = 0;
    for (; i + kGroupRows <= a.m; i += kGroupRows) Group<T, F, kGroupRows>(a, p, i);
    switch (a.m - i) {
      case 3:
        Group<T, F, 3>(a, p, i);
        break;
      case 2:
        Group<T, F, 2>(a, p, i);
        break;
      case 1:
        Group<T, F, 1>(a, p, i);
        break;
      default:
        break;
    }
  }
}

template <typename T>
void Run(const QuantArgs<T>& a, int64_t p_begin, int64_t p_end) {
  switch (a.format) {
    case BlockFormat::kQ8_0:
      return Panels<T, BlockFormat::kQ8_0>(a, p_begin, p_end);
    case BlockFormat::kQ4_0:
      return Panels<T, BlockFormat::kQ4_0>(a, p_begin, p_end);
    case BlockFormat::kQ4_1:
      return Panels<T, BlockFormat::kQ4_1>(a, p_begin, p_end);
    case BlockFormat::kQ5_0:
      return Panels<T, BlockFormat::kQ5_0>(a, p_begin, p_end);
    case BlockFormat::kQ5_1:
      return Panels<T, BlockFormat::kQ5_1>(a, p_begin, p_end);
    case BlockFormat::kQ4_K:
      return Panels<T, BlockFormat::kQ4_K>(a, p_begin, p_end);
    case BlockFormat::kQ5_K:
      return Panels<T, BlockFormat::kQ5_K>(a, p_begin, p_end);
    case BlockFormat::kQ6_K:
      return Panels<T, BlockFormat::kQ6_K>(a, p_begin, p_end);
    default:  // kNone and formats without kernels: never a packed weight's format
      return;
  }
}

}  // namespace

namespace {

inline int32_t Sum8(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// The portable loop's activation quantization (quant.cc), 8 lanes at a time:
// the same maximum, scale and round-to-nearest-even, so the same bytes for
// finite activations (a NaN or inf is garbage in either, differently).
template <typename T>
void QuantizeRows(const T* x, int64_t ldx, int64_t k, int64_t begin, int64_t end, int8_t* qx, float* dx,
                  int32_t* sx, int32_t* sx16) {
  const int64_t blocks = k / kQuantBlock;
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t i = begin; i < end; ++i) {
    for (int64_t b = 0; b < blocks; ++b) {
      const T* xb = x + i * ldx + b * kQuantBlock;
      __m256 v[4];
      for (int j = 0; j < 4; ++j) v[j] = Load8(xb + 8 * j);
      const __m256 m =
          _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                        _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
      const float amax = HorizontalMax8(m);
      const float d = amax / 127.0f, id = d != 0.0f ? 127.0f / amax : 0.0f;
      const __m256 s = _mm256_set1_ps(id);
      __m256i q[4];
      for (int j = 0; j < 4; ++j) q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], s));
      // Packed to bytes per 128-bit lane, then the 4-byte groups put in order.
      const __m256i bytes =
          _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qx + i * k + b * kQuantBlock),
                          _mm256_permutevar8x32_epi32(bytes, order));
      dx[i * blocks + b] = d;
      const int32_t s0 = Sum8(_mm256_add_epi32(q[0], q[1])), s1 = Sum8(_mm256_add_epi32(q[2], q[3]));
      sx[i * blocks + b] = s0 + s1;
      sx16[i * 2 * blocks + 2 * b] = s0;
      sx16[i * 2 * blocks + 2 * b + 1] = s1;
    }
  }
}

}  // namespace

void QuantizeRowsF32Avx2(const float* x, int64_t ldx, int64_t k, int64_t begin, int64_t end, int8_t* qx,
                         float* dx, int32_t* sx, int32_t* sx16) {
  QuantizeRows(x, ldx, k, begin, end, qx, dx, sx, sx16);
}
void QuantizeRowsBf16Avx2(const uint16_t* x, int64_t ldx, int64_t k, int64_t begin, int64_t end, int8_t* qx,
                          float* dx, int32_t* sx, int32_t* sx16) {
  QuantizeRows(x, ldx, k, begin, end, qx, dx, sx, sx16);
}

void QuantF32Avx2(const QuantArgs<float>& a, int64_t b, int64_t e) { Run(a, b, e); }
void QuantBf16Avx2(const QuantArgs<uint16_t>& a, int64_t b, int64_t e) { Run(a, b, e); }

}  // namespace shardlm::kernels::internal
