// Projections over a weight repacked into output panels, the layout the
// SIMD kernels stream fastest (docs/cpu_kernels.md, "Packed weights"):
//
//   y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n])
//
// w dtype[n, k] (nn.Linear's layout) becomes ceil(n / 48) panels of 48 output
// rows each; inside a panel the 48 weights of one k (f32), or of one pair of
// k (bf16, the pair adjacent as VDPBF16PS reads them), are contiguous:
//
//   f32   panel p, (k, j)  at  (p * k_len + k) * 48 + j
//   bf16  panel p, (k, j)  at  (p * pairs + k / 2) * 96 + 2 * j + k % 2,   pairs = ceil(k_len / 2)
//
// Rows past n and the odd k of the last bf16 pair are zero. A thread's share
// of panels is then one sequential stream, and each weight vector loaded
// meets several activation rows held as broadcasts (AVX-512: up to 8, the
// 48 x 8 outputs in registers; AVX2: 2), with no horizontal sums, and the
// hardware prefetchers see one stream. Each output sums its products in k order whatever m is, so a row's
// result does not depend on the rows batched with it.
//
// Epilogues: a product can also finish the element-wise step that follows it
// while its outputs are still in registers (docs/cpu_kernels.md, "Fused
// epilogues"): kAddTo adds them into y (the residual add), kSwiGlu takes a
// gate/up pair packed by PackGatedWeight and writes silu(gate) * up. Each
// rounds as the unfused pair of calls does, so the results are the same bits.
//
// Torch-free, like gemv.h, so that each SIMD variant has its own flags.
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"

namespace shardlm::kernels {

constexpr int64_t kPanelRows = 48;  // output rows per panel

// Elements of the packed form of a [n, k] weight of T (float or uint16_t bf16 bits).
template <typename T>
int64_t PackedElements(int64_t n, int64_t k);

// Writes w[n, k] in the packed layout into `out` (PackedElements(n, k) elements).
template <typename T>
void PackWeight(const T* w, int64_t n, int64_t k, T* out);

// Copies rows `rows[0..count)` of the original [n, k] weight out of its packed
// form into out[count, k] (an embedding lookup from a tied LM head).
template <typename T>
void UnpackRows(const T* packed, int64_t n, int64_t k, const int64_t* rows, int64_t count, T* out);

// A SwiGLU's [gate; up] weight, w[2 * inter, k] (gate rows first, as the
// model concatenates them): gate panel j and up panel j (the same 48
// features) adjacent, so one thread computes both, panels 2j and 2j + 1.
template <typename T>
int64_t PackedGatedElements(int64_t inter, int64_t k);
template <typename T>
void PackGatedWeight(const T* w, int64_t inter, int64_t k, T* out);

enum class PackedEpilogue {
  kStore,   // y = x w^T (+ bias)
  kAddTo,   // y += round(x w^T (+ bias)): the residual add
  kSwiGlu,  // y = round(round(silu(round(gate))) * round(up)), y T[m, n]; no bias
};

template <typename T>
struct PackedArgs {
  const T* x;  // T[m, ldx]
  int64_t ldx;
  const T* w;     // packed weight
  const T* bias;  // T[n] or nullptr
  T* y;           // T[m, ldy]
  int64_t ldy;
  int64_t m;
  int64_t n;  // outputs: the weight's rows, or with kSwiGlu the features (half the rows)
  int64_t k;
  PackedEpilogue epilogue = PackedEpilogue::kStore;
};

// Computes the outputs of panels [p_begin, p_end) for all m rows. With
// kSwiGlu both ends are even (whole gate/up pairs).
using PackedF32Fn = void (*)(const PackedArgs<float>&, int64_t p_begin, int64_t p_end);
using PackedBf16Fn = void (*)(const PackedArgs<uint16_t>&, int64_t p_begin, int64_t p_end);

// The kernels per instruction set: AVX-512 (packed_avx512.cc), AVX2 + FMA
// (packed_avx2.cc, the same bits), else a portable loop (correct at any ISA,
// kept for weights packed before the ISA was capped in tests).
PackedF32Fn PackedF32(Isa isa);
PackedBf16Fn PackedBf16(Isa isa);

namespace internal {
void PackedF32Scalar(const PackedArgs<float>&, int64_t, int64_t);
void PackedBf16Scalar(const PackedArgs<uint16_t>&, int64_t, int64_t);
void PackedF32Avx512(const PackedArgs<float>&, int64_t, int64_t);
void PackedBf16Avx512(const PackedArgs<uint16_t>&, int64_t, int64_t);
void PackedF32Avx2(const PackedArgs<float>&, int64_t, int64_t);
void PackedBf16Avx2(const PackedArgs<uint16_t>&, int64_t, int64_t);
}  // namespace internal

}  // namespace shardlm::kernels
