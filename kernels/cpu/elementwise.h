// Vectorised element-wise loops whose scalar form is bound by expf: SiLU x up
// (one exp per intermediate feature and row) and the log-sum-exp of a row of
// logits (one exp per vocabulary entry, for every sampled token's logprob).
// Torch-free, one translation unit per instruction set as cpu/gemv.h;
// kernels/fused.cc and model/sampling.cc call them and keep scalar loops for
// CPUs without one.
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

// nullptr where `isa` has none.
SiluMulF32Fn SiluMulF32Kernel(Isa isa);
SiluMulBf16Fn SiluMulBf16Kernel(Isa isa);
LogSumExpFn LogSumExpKernel(Isa isa);

namespace internal {
void SiluMulF32Avx512(const float*, const float*, float*, int64_t);
void SiluMulBf16Avx512(const uint16_t*, const uint16_t*, uint16_t*, int64_t);
float LogSumExpAvx512(const float*, int64_t);
}  // namespace internal

}  // namespace shardlm::kernels
