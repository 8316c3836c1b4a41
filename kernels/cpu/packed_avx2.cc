// AVX2 + FMA products over packed weights (cpu/packed.h), for CPUs without
// AVX-512: the same 48-row panels, so a weight packs the same way whichever
// kernel runs it.
//
// A tile is one panel (48 outputs, six 8-float vectors) x one or two
// activation rows: up to 12 accumulators of the 16 registers. Each step loads
// the panel's six weight vectors for one k (f32), or for one k pair (bf16:
// each 32-bit lane holds the pair, widened to two f32 vectors by a shift and a
// mask), and multiplies them into a broadcast of each row's activation.
// The bf16 pair is multiplied odd k first, then even, each an FMA of an exact
// product: the order and rounding of VDPBF16PS, so these kernels give the
// AVX-512 kernels' bits (denormals aside: VDPBF16PS reads denormal inputs as
// 0 and flushes denormal sums, where these FMAs keep them).
// Each output sums in k order whatever m is, so a row's result does not
// depend on the rows batched with it.
//
// One or two rows: the whole k range in registers, each panel streamed once.
// More rows: blocks of 128 steps (24 KB of panel, which stays in L1 while
// every pair of rows passes over it), the accumulators parked in a per-thread
// f32 buffer between blocks. A tile's outputs go out through the product's
// epilogue (Finish): stored, added into y, or, for a gate/up pair, the gate
// panel's parked until the up panel after it multiplies them.
#include <vector>

#include "kernels/cpu/avx2_math.h"
#include "kernels/cpu/packed.h"

namespace shardlm::kernels::internal {
namespace {

constexpr int kVectors = kPanelRows / 8;  // accumulators per activation row
constexpr int kTileRows = 2;
constexpr int64_t kBlockSteps = 128;  // steps per block when m > kTileRows
#ifndef SHARDLM_PACKED_AVX2_PREFETCH
#define SHARDLM_PACKED_AVX2_PREFETCH 8192
#endif
// Bytes of panel a tile over the whole k range prefetches ahead of its loads
// (one or two rows), into L1.
constexpr int kPrefetchBytes = SHARDLM_PACKED_AVX2_PREFETCH;

// How a tile asks for lines ahead of its loads.
enum class Ahead {
  kNear,   // one or two rows over the whole k: kPrefetchBytes ahead, into L1
  kBlock,  // more rows, over a block: the same step of the next block, into L2, so that the
           // next block arrives while every pair of rows computes on this one (without it,
           // 8 rows ran at half the rate: each block waited for its lines, then computed;
           // with the pairs taking turns, as Panels has them, 15-20% faster again)
};

template <typename T>
struct Tile {
  const T* w;  // the panel, at step s0
  const T* x;  // first activation row of the tile
  int64_t ldx, k;
  int64_t s0, s1;
  const float* park_in;  // accumulators to resume from ([M][48]), or nullptr to start at 0
  float* park_out;       // where to park them, or nullptr when s1 is the last step
  int64_t p;             // the panel's index
  int64_t ahead;         // bytes past each step to prefetch (Ahead::kNear, kBlock)
  int64_t every, phase;  // Ahead::kBlock: prefetch the steps s0 + phase, + every, ...
  const T* bias;         // the whole bias, or nullptr
  T* y;                  // the tile's first output row
  int64_t ldy;
  int64_t n;  // outputs (PackedArgs::n)
  PackedEpilogue epilogue;
  float* gate;  // kSwiGlu: the tile's rows of the thread's [m][48] gate values
};

// The bf16 activations of pair s of a row, widened: the odd k's and the even
// k's (past an odd k the odd one is 0, as in the weight).
inline void PairAt(const uint16_t* x, int64_t s, int64_t k, __m256* odd, __m256* even) {
  *even = _mm256_set1_ps(Bf16ToFloat(x[2 * s]));
  *odd = _mm256_set1_ps(2 * s + 1 < k ? Bf16ToFloat(x[2 * s + 1]) : 0.0f);
}

// A value as T holds it: f32 as is, bf16 rounded.
template <typename T>
inline __m256 AsDtype(__m256 v) {
  return AsDtype8(static_cast<const T*>(nullptr), v);
}

// Vector v of row i of a tile's sums, [M][48] floats.
inline __m256 Acc(const float* acc, int i, int v) { return _mm256_loadu_ps(acc + i * kPanelRows + 8 * v); }

// Writes a finished tile's sums through its epilogue (packed.h):
// each rounds where the unfused calls (the product, then SiluMul or
// AddInPlace) round, so fused and unfused give the same bits.
template <typename T, int M>
inline void Finish(const Tile<T>& t, const float* acc) {
  for (int v = 0; v < kVectors; ++v) {
    if (t.epilogue == PackedEpilogue::kSwiGlu) {
      // Panel 2j holds gate features [48j, 48j + 48), panel 2j + 1 their up.
      const int64_t col = (t.p / 2) * kPanelRows + 8 * v;
      if (col >= t.n) continue;
      if (t.p % 2 == 0) {
        for (int i = 0; i < M; ++i)
          _mm256_storeu_ps(t.gate + i * kPanelRows + 8 * v, AsDtype<T>(Acc(acc, i, v)));
        continue;
      }
      for (int i = 0; i < M; ++i) {
        const __m256 act = AsDtype<T>(Silu8(_mm256_loadu_ps(t.gate + i * kPanelRows + 8 * v)));
        StorePart(t.y + i * t.ldy + col, t.n - col, _mm256_mul_ps(act, AsDtype<T>(Acc(acc, i, v))));
      }
      continue;
    }
    const int64_t col = t.p * kPanelRows + 8 * v;
    if (col >= t.n) continue;
    const int64_t left = t.n - col;
    const __m256 b = t.bias != nullptr ? LoadPart(t.bias + col, left) : _mm256_setzero_ps();
    for (int i = 0; i < M; ++i) {
      T* y = t.y + i * t.ldy + col;
      __m256 r = _mm256_add_ps(Acc(acc, i, v), b);
      if (t.epilogue == PackedEpilogue::kAddTo) r = _mm256_add_ps(LoadPart(y, left), AsDtype<T>(r));
      StorePart(y, left, r);
    }
  }
}

// Asks for the three cache lines of the step `ahead` bytes past w.
template <Ahead A>
inline void Prefetch(const void* w, int64_t ahead) {
  const char* p = static_cast<const char*>(w) + ahead;
  for (int line = 0; line < 3; ++line) {
    if constexpr (A == Ahead::kNear) _mm_prefetch(p + 64 * line, _MM_HINT_T0);
    if constexpr (A == Ahead::kBlock) _mm_prefetch(p + 64 * line, _MM_HINT_T1);
  }
}

// The steps [s0, s1) of a tile, its accumulators in registers throughout.
template <typename T, int M, Ahead A>
void RunTile(const Tile<T>& t) {
  __m256 acc[M][kVectors];
#pragma GCC unroll 2
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 6
    for (int u = 0; u < kVectors; ++u) {
      acc[i][u] =
          t.park_in != nullptr ? _mm256_loadu_ps(t.park_in + i * kPanelRows + 8 * u) : _mm256_setzero_ps();
    }
  }
  const T* w = t.w;
  int64_t countdown = t.phase + 1;  // Ahead::kBlock: steps to the next one this tile asks for
  auto ask = [&] {
    if constexpr (A == Ahead::kNear) Prefetch<A>(w, t.ahead);
    if constexpr (A == Ahead::kBlock) {
      if (--countdown == 0) {
        Prefetch<A>(w, t.ahead);
        countdown = t.every;
      }
    }
  };
  if constexpr (sizeof(T) == 4) {
    for (int64_t s = t.s0; s < t.s1; ++s, w += kPanelRows) {
      ask();
      __m256 xv[M];
#pragma GCC unroll 2
      for (int i = 0; i < M; ++i) xv[i] = _mm256_broadcast_ss(t.x + i * t.ldx + s);
#pragma GCC unroll 6
      for (int u = 0; u < kVectors; ++u) {
        const __m256 wv = _mm256_load_ps(w + 8 * u);
#pragma GCC unroll 2
        for (int i = 0; i < M; ++i) acc[i][u] = _mm256_fmadd_ps(wv, xv[i], acc[i][u]);
      }
    }
  } else {
    // Each lane's pair of weights times the pair of activations, odd k first
    // (VDPBF16PS's order).
    const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
    for (int64_t s = t.s0; s < t.s1; ++s, w += 2 * kPanelRows) {
      ask();
      __m256 odd[M], even[M];
#pragma GCC unroll 2
      for (int i = 0; i < M; ++i) PairAt(t.x + i * t.ldx, s, t.k, &odd[i], &even[i]);
#pragma GCC unroll 6
      for (int u = 0; u < kVectors; ++u) {
        const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + 16 * u));
        const __m256 wodd = _mm256_castsi256_ps(_mm256_and_si256(v, high));
        const __m256 weven = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
#pragma GCC unroll 2
        for (int i = 0; i < M; ++i) {
          acc[i][u] = _mm256_fmadd_ps(wodd, odd[i], acc[i][u]);
          acc[i][u] = _mm256_fmadd_ps(weven, even[i], acc[i][u]);
        }
      }
    }
  }
  // Out through memory, with constant indices only: an accumulator indexed
  // at run time (as Finish's loops would) keeps the whole array in memory,
  // stored every step (half the speed at 8 rows).
  alignas(32) float done[M * kPanelRows];
  float* out = t.park_out != nullptr ? t.park_out : done;
#pragma GCC unroll 2
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 6
    for (int u = 0; u < kVectors; ++u) _mm256_storeu_ps(out + i * kPanelRows + 8 * u, acc[i][u]);
  }
  if (t.park_out == nullptr) Finish<T, M>(t, done);
}

// RunTile<T, M, A> by Ahead.
template <typename T, int M>
constexpr void (*kTiles[2])(const Tile<T>&) = {RunTile<T, M, Ahead::kNear>, RunTile<T, M, Ahead::kBlock>};

template <typename T>
void Panels(const PackedArgs<T>& a, int64_t p_begin, int64_t p_end) {
  constexpr int64_t g = sizeof(T) == 2 ? 2 : 1;  // k per step
  const int64_t steps = (a.k + g - 1) / g;
  const int64_t panel = steps * kPanelRows * g;  // elements per panel
  Tile<T> t;
  t.ldx = a.ldx;
  t.k = a.k;
  t.ldy = a.ldy;
  t.n = a.n;
  t.bias = a.bias;
  t.epilogue = a.epilogue;
  thread_local std::vector<float> gate;
  if (a.epilogue == PackedEpilogue::kSwiGlu && static_cast<int64_t>(gate.size()) < a.m * kPanelRows)
    gate.resize(a.m * kPanelRows);
  thread_local std::vector<float> park;
  const bool blocked = a.m > kTileRows;
  if (blocked && static_cast<int64_t>(park.size()) < a.m * kPanelRows) park.resize(a.m * kPanelRows);
  const int64_t block = blocked ? kBlockSteps : steps;
  t.ahead = blocked ? kBlockSteps * kPanelRows * g * static_cast<int64_t>(sizeof(T)) : kPrefetchBytes;
  t.every = (a.m + kTileRows - 1) / kTileRows;
  t.phase = 0;
  for (int64_t p = p_begin; p < p_end; ++p) {
    t.p = p;
    for (int64_t s0 = 0; s0 < steps; s0 += block) {
      t.s0 = s0;
      t.s1 = s0 + block < steps ? s0 + block : steps;
      t.w = a.w + p * panel + s0 * kPanelRows * g;
      for (int64_t i0 = 0; i0 < a.m; i0 += kTileRows) {
        t.x = a.x + i0 * a.ldx;
        t.y = a.y + i0 * a.ldy;
        t.gate = gate.empty() ? nullptr : gate.data() + i0 * kPanelRows;  // kSwiGlu only
        t.park_in = s0 > 0 ? park.data() + i0 * kPanelRows : nullptr;
        t.park_out = t.s1 < steps ? park.data() + i0 * kPanelRows : nullptr;
        // Over a block, the pairs of rows take turns asking for the next
        // block's steps (pair j the steps j, j + pairs, ...), so the requests
        // spread over the whole block's compute.
        const Ahead ahead = blocked ? Ahead::kBlock : Ahead::kNear;
        t.phase = i0 / kTileRows;
        (a.m - i0 >= 2 ? kTiles<T, 2>[static_cast<int>(ahead)] : kTiles<T, 1>[static_cast<int>(ahead)])(t);
      }
    }
  }
}

}  // namespace

void PackedF32Avx2(const PackedArgs<float>& a, int64_t b, int64_t e) { Panels(a, b, e); }
void PackedBf16Avx2(const PackedArgs<uint16_t>& a, int64_t b, int64_t e) { Panels(a, b, e); }

}  // namespace shardlm::kernels::internal
