// AVX-512 products over packed weights (cpu/packed.h; compiled with
// -mavx512f -mavx512bw -mavx512vl -mavx512bf16, called only when cpu/isa.cc
// found them).
//
// A tile is one panel (48 outputs, three vectors) x up to 8 activation rows:
// 24 accumulators. Each step loads the panel's three weight vectors for one k
// (f32) or one k pair (bf16) and multiplies them into a broadcast of each
// row's activation (FMA for f32, VDPBF16PS for bf16 pairs). Up to 4 rows a
// tile spans 2-4 adjacent panels instead, for more independent chains. Up to
// 8 rows the whole k range runs in registers and the weights stream once. More rows go
// through in blocks of 128 steps (24 KB of panel, which stays in L1 for every
// tile of 8 rows), the accumulators parked in a per-thread f32 buffer between
// blocks; each output still sums in k order. A tile's outputs go out
// through the product's epilogue (Finish): stored, added into y, or, for a
// gate/up pair, the gate panel's parked in a per-thread buffer until the up
// panel after it multiplies them.
#include <vector>

#include "kernels/cpu/avx512_math.h"
#include "kernels/cpu/packed.h"

namespace shardlm::kernels::internal {
namespace {

constexpr int kVectors = kPanelRows / 16;  // accumulators per activation row
constexpr int kTileRows = 8;
constexpr int64_t kBlockSteps = 128;  // steps per block when m > kTileRows
#ifndef SHARDLM_PACKED_PREFETCH
#define SHARDLM_PACKED_PREFETCH 16384
#endif
// Bytes of panel a tile prefetches into L1 ahead of its loads, split among
// its panels: far enough that each core keeps enough lines in flight while
// the multiplies run. 512 bytes ahead halved the batch-8 f32 rate; 4-16 KB
// were within noise of each other at 1 to 8 rows (docs/cpu_kernels.md).
constexpr int kPrefetchBytes = SHARDLM_PACKED_PREFETCH;

// One tile's work: rows [0, M) of x against steps [s0, s1) of Q adjacent
// panels.
template <typename T>
struct Tile {
  const T* w;     // the first panel
  int64_t panel;  // elements per panel
  const T* x;     // first activation row of the tile
  int64_t ldx, k;
  int64_t s0, s1;
  const float* park_in;  // accumulators to resume from ([M][48], Q = 1), or nullptr to start at 0
  float* park_out;       // where to park them, or nullptr when s1 is the last step
  int64_t p0;            // the first panel's index
  const T* bias;         // the whole bias, or nullptr
  T* y;                  // y + i0 * ldy: the tile's first row
  int64_t ldy;
  int64_t n;  // outputs (PackedArgs::n)
  PackedEpilogue epilogue;
  float* gate;  // kSwiGlu: the tile's rows of the thread's [m][48] gate values, read by the next panel
};

inline __m512 Broadcast(const float* x, int64_t s, int64_t) { return _mm512_set1_ps(x[s]); }

// The bf16 pair (x[2s], x[2s + 1]) in every 32-bit lane; past an odd k the
// second is 0, as in the packed weight.
inline __m512bh Broadcast(const uint16_t* x, int64_t s, int64_t k) {
  uint32_t pair = x[2 * s];
  if (2 * s + 1 < k) pair |= static_cast<uint32_t>(x[2 * s + 1]) << 16;
  return (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
}
inline __m512bh BroadcastFull(const uint16_t* x, int64_t s) {
  uint32_t pair;
  __builtin_memcpy(&pair, x + 2 * s, sizeof(pair));
  return (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
}
inline __m512 BroadcastFull(const float* x, int64_t s) { return _mm512_set1_ps(x[s]); }

inline __m512 LoadW(const float* p) { return _mm512_load_ps(p); }
inline __m512bh LoadW(const uint16_t* p) { return (__m512bh)_mm512_load_si512(p); }
inline __m512 Mac(__m512 acc, __m512 w, __m512 x) { return _mm512_fmadd_ps(w, x, acc); }
inline __m512 Mac(__m512 acc, __m512bh w, __m512bh x) { return _mm512_dpbf16_ps(acc, w, x); }

// A value as T holds it: f32 as is, bf16 rounded.
template <typename T>
inline __m512 AsDtype(__m512 v) {
  if constexpr (sizeof(T) == 2) return RoundBf16(v);
  return v;
}

// Writes a finished tile's accumulators through its epilogue (packed.h):
// each rounds where the unfused calls (the product, then SiluMul or
// AddInPlace) round, so fused and unfused give the same bits.
template <typename T, int M, int U>
inline void Finish(const Tile<T>& t, __m512 (&acc)[M][U]) {
  for (int u = 0; u < U; ++u) {
    const int64_t p = t.p0 + u / kVectors;
    const int v = u % kVectors;
    if (t.epilogue == PackedEpilogue::kSwiGlu) {
      // Panel 2j holds gate features [48j, 48j + 48), panel 2j + 1 their up.
      const int64_t col = (p / 2) * kPanelRows + 16 * v;
      if (col >= t.n) continue;
      if (p % 2 == 0) {
        for (int i = 0; i < M; ++i) _mm512_storeu_ps(t.gate + i * kPanelRows + 16 * v, AsDtype<T>(acc[i][u]));
        continue;
      }
      const __mmask16 mask = TailMask16(t.n - col);
      for (int i = 0; i < M; ++i) {
        const __m512 act = AsDtype<T>(Silu(_mm512_loadu_ps(t.gate + i * kPanelRows + 16 * v)));
        MaskStore(t.y + i * t.ldy + col, mask, _mm512_mul_ps(act, AsDtype<T>(acc[i][u])));
      }
      continue;
    }
    const int64_t col = p * kPanelRows + 16 * v;
    if (col >= t.n) continue;
    const __mmask16 mask = TailMask16(t.n - col);
    const __m512 b = t.bias != nullptr ? MaskLoad(mask, t.bias + col) : _mm512_setzero_ps();
    for (int i = 0; i < M; ++i) {
      T* y = t.y + i * t.ldy + col;
      __m512 r = _mm512_add_ps(acc[i][u], b);
      if (t.epilogue == PackedEpilogue::kAddTo) r = _mm512_add_ps(MaskLoad(mask, y), AsDtype<T>(r));
      MaskStore(y, mask, r);
    }
  }
}

// Keeps a loaded vector in a register (otherwise GCC folds the load into
// each multiply that uses it, and the load ports bound the loop).
template <typename V>
inline void InRegister(V& v) {
  __asm__("" : "+v"(v));
}

template <typename T, int M, int Q, bool kPrefetch>
void RunTile(const Tile<T>& t) {
  constexpr int64_t g = sizeof(T) == 2 ? 2 : 1;  // k per step
  constexpr int64_t step = kPanelRows * g;       // elements per step
  constexpr int U = Q * kVectors;                // weight vectors per step
  using W = decltype(LoadW(t.w));
  __m512 acc[M][U];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 12
    for (int u = 0; u < U; ++u) {
      acc[i][u] =
          t.park_in != nullptr ? _mm512_loadu_ps(t.park_in + i * kPanelRows + 16 * u) : _mm512_setzero_ps();
    }
  }
  const T* wq[Q];
  for (int q = 0; q < Q; ++q) wq[q] = t.w + q * t.panel + t.s0 * step;
  // bf16 with an odd k: the last pair is half padding, broadcast separately.
  const int64_t full = g == 2 && t.s1 * 2 > t.k ? t.s1 - 1 : t.s1;
  for (int64_t s = t.s0; s < full; ++s) {
    W wv[U];
#pragma GCC unroll 12
    for (int u = 0; u < U; ++u) {
      const T* p = wq[u / kVectors] + (u % kVectors) * 16 * g;
      if (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes / Q, _MM_HINT_T0);
      wv[u] = LoadW(p);
      InRegister(wv[u]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      const auto xv = BroadcastFull(t.x + i * t.ldx, s);
#pragma GCC unroll 12
      for (int u = 0; u < U; ++u) acc[i][u] = Mac(acc[i][u], wv[u], xv);
    }
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) wq[q] += step;
  }
  if (full < t.s1) {
    W wv[U];
    for (int u = 0; u < U; ++u) wv[u] = LoadW(wq[u / kVectors] + (u % kVectors) * 16 * g);
    for (int i = 0; i < M; ++i) {
      const auto xv = Broadcast(t.x + i * t.ldx, full, t.k);
      for (int u = 0; u < U; ++u) acc[i][u] = Mac(acc[i][u], wv[u], xv);
    }
  }
  if (t.park_out != nullptr) {
    for (int i = 0; i < M; ++i) {
      for (int u = 0; u < U; ++u) _mm512_storeu_ps(t.park_out + i * kPanelRows + 16 * u, acc[i][u]);
    }
    return;
  }
  Finish(t, acc);
}

template <typename T>
using TileFn = void (*)(const Tile<T>&);

// One panel per tile, [prefetch][rows - 1].
template <typename T>
constexpr TileFn<T> kTiles[2][kTileRows] = {
    {RunTile<T, 1, 1, false>, RunTile<T, 2, 1, false>, RunTile<T, 3, 1, false>, RunTile<T, 4, 1, false>,
     RunTile<T, 5, 1, false>, RunTile<T, 6, 1, false>, RunTile<T, 7, 1, false>, RunTile<T, 8, 1, false>},
    {RunTile<T, 1, 1, true>, RunTile<T, 2, 1, true>, RunTile<T, 3, 1, true>, RunTile<T, 4, 1, true>,
     RunTile<T, 5, 1, true>, RunTile<T, 6, 1, true>, RunTile<T, 7, 1, true>, RunTile<T, 8, 1, true>}};

// Up to 4 rows, tiles span several panels, so that a step has at least 6
// independent accumulator chains to hide the multiply's latency behind and
// the thread streams several panels at once: [rows - 1] -> (tile, panels).
template <typename T>
struct WideTile {
  TileFn<T> fn;
  int panels;
};
template <typename T>
constexpr WideTile<T> kWideTiles[4] = {{RunTile<T, 1, 4, true>, 4},
                                       {RunTile<T, 2, 3, true>, 3},
                                       {RunTile<T, 3, 2, true>, 2},
                                       {RunTile<T, 4, 2, true>, 2}};

template <typename T>
void Panels(const PackedArgs<T>& a, int64_t p_begin, int64_t p_end) {
  const int64_t steps = sizeof(T) == 2 ? (a.k + 1) / 2 : a.k;
  Tile<T> t;
  t.panel = steps * kPanelRows * (sizeof(T) == 2 ? 2 : 1);
  t.ldx = a.ldx;
  t.k = a.k;
  t.ldy = a.ldy;
  t.n = a.n;
  t.bias = a.bias;
  t.epilogue = a.epilogue;
  thread_local std::vector<float> gate;
  if (a.epilogue == PackedEpilogue::kSwiGlu && static_cast<int64_t>(gate.size()) < a.m * kPanelRows)
    gate.resize(a.m * kPanelRows);
  auto at_panel = [&](int64_t p) {
    t.w = a.w + p * t.panel;
    t.p0 = p;
  };
  if (a.m <= kTileRows) {
    // The whole k range in registers, each panel streamed once.
    t.x = a.x;
    t.y = a.y;
    t.gate = gate.data();
    t.s0 = 0;
    t.s1 = steps;
    t.park_in = nullptr;
    t.park_out = nullptr;
    int64_t p = p_begin;
    if (a.m <= 4) {
      const WideTile<T> wide = kWideTiles<T>[a.m - 1];
      for (; p + wide.panels <= p_end; p += wide.panels) {
        at_panel(p);
        wide.fn(t);
      }
    }
    for (; p < p_end; ++p) {
      at_panel(p);
      kTiles<T>[1][a.m - 1](t);
    }
    return;
  }
  // More rows: blocks of steps, each met by every tile of 8 rows while it is
  // in L1; the accumulators wait in `park` between blocks.
  thread_local std::vector<float> park;
  if (static_cast<int64_t>(park.size()) < a.m * kPanelRows) park.resize(a.m * kPanelRows);
  for (int64_t p = p_begin; p < p_end; ++p) {
    at_panel(p);
    for (int64_t s0 = 0; s0 < steps; s0 += kBlockSteps) {
      t.s0 = s0;
      t.s1 = s0 + kBlockSteps < steps ? s0 + kBlockSteps : steps;
      for (int64_t i0 = 0; i0 < a.m; i0 += kTileRows) {
        const int64_t rows = a.m - i0 < kTileRows ? a.m - i0 : kTileRows;
        t.x = a.x + i0 * a.ldx;
        t.y = a.y + i0 * a.ldy;
        t.gate = gate.data() + i0 * kPanelRows;
        t.park_in = s0 > 0 ? park.data() + i0 * kPanelRows : nullptr;
        t.park_out = t.s1 < steps ? park.data() + i0 * kPanelRows : nullptr;
        kTiles<T>[i0 == 0][rows - 1](t);
      }
    }
  }
}

}  // namespace

void PackedF32Avx512(const PackedArgs<float>& a, int64_t b, int64_t e) { Panels(a, b, e); }
void PackedBf16Avx512(const PackedArgs<uint16_t>& a, int64_t b, int64_t e) { Panels(a, b, e); }

}  // namespace shardlm::kernels::internal
