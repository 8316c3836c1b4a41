// Small-batch matrix-vector products on the CPU, the operation batch-1 and
// small-batch decode spend their time in:
//
//   y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n])
//
// w is the weight in PyTorch's nn.Linear layout, f32|bf16[out, in], read
// row by row. The AVX-512 kernels stream every weight byte from memory once
// per call whatever m is (tiles of 8 activation rows reuse the weight rows
// from L1); the AVX2 and scalar ones once per kMaxGemvRows rows. Products accumulate in f32; a bf16
// output is rounded once, to nearest even. Torch-free so that each
// instruction-set variant can be compiled with its own flags (gemv_avx512.cc,
// gemv_avx2.cc, gemv_scalar.cc) without leaking those instructions into code
// shared with the rest of the binary.
//
//   GemvArgs a{x, ldx, w, bias, y, ldy, m, k};
//   GemvF32(Isa::kAvx512)(a, n_begin, n_end);   // one thread's share of rows
//
// cpu/isa.h picks the variant at run time; kernels/linear.h is the entry
// point the model calls.
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"

namespace shardlm::kernels {

// Activation rows the AVX2 and scalar kernels take per pass over the weight.
constexpr int64_t kMaxGemvRows = 8;

// T is float or uint16_t (bf16 bits) for x, w, bias and y alike.
template <typename T>
struct GemvArgs {
  const T* x;  // T[m, ldx]
  int64_t ldx;
  const T* w;     // T[n, k]
  const T* bias;  // T[n] or nullptr
  T* y;           // T[m, ldy]
  int64_t ldy;
  int64_t m, k;
};

using GemvF32Fn = void (*)(const GemvArgs<float>&, int64_t n_begin, int64_t n_end);
using GemvBf16Fn = void (*)(const GemvArgs<uint16_t>&, int64_t n_begin, int64_t n_end);

// The kernels per instruction set; nullptr where the build lacks one.
GemvF32Fn GemvF32(Isa isa);
GemvBf16Fn GemvBf16(Isa isa);

// Sum of n floats: the read-bandwidth probe of the benchmarks (streams once).
using SumF32Fn = float (*)(const float* p, int64_t n);
SumF32Fn SumF32(Isa isa);

namespace internal {
void GemvF32Scalar(const GemvArgs<float>&, int64_t, int64_t);
void GemvBf16Scalar(const GemvArgs<uint16_t>&, int64_t, int64_t);
float SumF32Scalar(const float*, int64_t);
void GemvF32Avx2(const GemvArgs<float>&, int64_t, int64_t);
void GemvBf16Avx2(const GemvArgs<uint16_t>&, int64_t, int64_t);
float SumF32Avx2(const float*, int64_t);
void GemvF32Avx512(const GemvArgs<float>&, int64_t, int64_t);
void GemvBf16Avx512(const GemvArgs<uint16_t>&, int64_t, int64_t);
float SumF32Avx512(const float*, int64_t);
}  // namespace internal

}  // namespace shardlm::kernels
