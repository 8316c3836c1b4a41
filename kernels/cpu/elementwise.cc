#include "kernels/cpu/elementwise.h"

namespace shardlm::kernels {
namespace {

// `fn` where `isa` is AVX-512, else nullptr: no other set has these loops.
template <typename Fn>
Fn OnAvx512(Isa isa, Fn fn) {
  return isa == Isa::kAvx512 ? fn : nullptr;
}

}  // namespace

SiluMulF32Fn SiluMulF32Kernel(Isa isa) { return OnAvx512(isa, internal::SiluMulF32Avx512); }
SiluMulBf16Fn SiluMulBf16Kernel(Isa isa) { return OnAvx512(isa, internal::SiluMulBf16Avx512); }
LogSumExpFn LogSumExpKernel(Isa isa) { return OnAvx512(isa, internal::LogSumExpAvx512); }
ArgMaxFn ArgMaxKernel(Isa isa) { return OnAvx512(isa, internal::ArgMaxAvx512); }
RmsNormF32Fn RmsNormF32Kernel(Isa isa) { return OnAvx512(isa, internal::RmsNormF32Avx512); }
RmsNormBf16Fn RmsNormBf16Kernel(Isa isa) { return OnAvx512(isa, internal::RmsNormBf16Avx512); }
RotaryF32Fn RotaryF32Kernel(Isa isa) { return OnAvx512(isa, internal::RotaryF32Avx512); }
RotaryBf16Fn RotaryBf16Kernel(Isa isa) { return OnAvx512(isa, internal::RotaryBf16Avx512); }
AddF32Fn AddF32Kernel(Isa isa) { return OnAvx512(isa, internal::AddF32Avx512); }
AddBf16Fn AddBf16Kernel(Isa isa) { return OnAvx512(isa, internal::AddBf16Avx512); }

}  // namespace shardlm::kernels
