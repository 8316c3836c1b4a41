// Vectorised element-wise loops of a decoder layer: SiLU x up (one exp per
// intermediate feature and row), RMSNorm, rotary and the residual add, and
// the log-sum-exp of a row of logits (one exp per vocabulary entry, for every
// sampled token's logprob) and its arg max (the greedy token). In bf16 the scalar loops spend their time
// converting one element at a time (a batch-8 step's norms, rotary and adds
// took 7x the time their bytes take to read); these convert 16 (AVX-512) or
// 8 (AVX2) at a time. Torch-free, one translation unit per instruction set as
// cpu/gemv.h; kernels/fused.cc and model/sampling.cc call them and keep
// scalar loops for CPUs with neither.
//
// Rounding is the scalar loops' (kernels/fused.h): RMSNorm normalises in f32,
// rounds to the dtype, then scales by the weight in it; rotary and the add
// compute in f32 and round once. Only the order of the RMSNorm's sum of
// squares differs (16 partial sums). The AVX2 loops give the AVX-512 ones'
// bits, all but log-sum-exp, which adds in its own order.
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"

namespace shardlm::kernels {

// o[i] = round(silu(g[i])) * u[i], rounded to the type (Hugging Face rounds
// the activation to the compute dtype before the product). T: float or bf16 bits.
using SiluMulF32Fn = void (*)(const float* g, const float* u, float* o, int64_t n);
using SiluMulBf16Fn = void (*)(const uint16_t* g, const uint16_t* u, uint16_t* o, int64_t n);
// log(sum(exp(x[i]))), in f32 with the maximum taken out first.
using LogSumExpFn = float (*)(const float* x, int64_t n);
// The index of the largest x[i], the first of equals (std::max_element's
// answer), for n >= 1 values; -1 when one is NaN.
using ArgMaxFn = int64_t (*)(const float* x, int64_t n);
// out = rmsnorm(x) * w over one row of n (out may be x).
using RmsNormF32Fn = void (*)(const float* x, const float* w, float* out, int64_t n, float eps);
using RmsNormBf16Fn = void (*)(const uint16_t* x, const uint16_t* w, uint16_t* out, int64_t n, float eps);
// Rotate-half of `heads` heads of 2 * half at x (heads contiguous), by one
// row's cos and sin (f32[half]), in place.
using RotaryF32Fn = void (*)(float* x, int64_t heads, int64_t half, const float* cos, const float* sin);
using RotaryBf16Fn = void (*)(uint16_t* x, int64_t heads, int64_t half, const float* cos, const float* sin);
// x[i] += y[i].
using AddF32Fn = void (*)(float* x, const float* y, int64_t n);
using AddBf16Fn = void (*)(uint16_t* x, const uint16_t* y, int64_t n);

// nullptr for Isa::kScalar (the callers' own loops).
SiluMulF32Fn SiluMulF32Kernel(Isa isa);
SiluMulBf16Fn SiluMulBf16Kernel(Isa isa);
LogSumExpFn LogSumExpKernel(Isa isa);
ArgMaxFn ArgMaxKernel(Isa isa);
RmsNormF32Fn RmsNormF32Kernel(Isa isa);
RmsNormBf16Fn RmsNormBf16Kernel(Isa isa);
RotaryF32Fn RotaryF32Kernel(Isa isa);
RotaryBf16Fn RotaryBf16Kernel(Isa isa);
AddF32Fn AddF32Kernel(Isa isa);
AddBf16Fn AddBf16Kernel(Isa isa);

namespace internal {
void SiluMulF32Avx512(const float*, const float*, float*, int64_t);
void SiluMulBf16Avx512(const uint16_t*, const uint16_t*, uint16_t*, int64_t);
float LogSumExpAvx512(const float*, int64_t);
int64_t ArgMaxAvx512(const float*, int64_t);
void RmsNormF32Avx512(const float*, const float*, float*, int64_t, float);
void RmsNormBf16Avx512(const uint16_t*, const uint16_t*, uint16_t*, int64_t, float);
void RotaryF32Avx512(float*, int64_t, int64_t, const float*, const float*);
void RotaryBf16Avx512(uint16_t*, int64_t, int64_t, const float*, const float*);
void AddF32Avx512(float*, const float*, int64_t);
void AddBf16Avx512(uint16_t*, const uint16_t*, int64_t);

void SiluMulF32Avx2(const float*, const float*, float*, int64_t);
void SiluMulBf16Avx2(const uint16_t*, const uint16_t*, uint16_t*, int64_t);
float LogSumExpAvx2(const float*, int64_t);
int64_t ArgMaxAvx2(const float*, int64_t);
void RmsNormF32Avx2(const float*, const float*, float*, int64_t, float);
void RmsNormBf16Avx2(const uint16_t*, const uint16_t*, uint16_t*, int64_t, float);
void RotaryF32Avx2(float*, int64_t, int64_t, const float*, const float*);
void RotaryBf16Avx2(uint16_t*, int64_t, int64_t, const float*, const float*);
void AddF32Avx2(float*, const float*, int64_t);
void AddBf16Avx2(uint16_t*, const uint16_t*, int64_t);
}  // namespace internal

}  // namespace shardlm::kernels
