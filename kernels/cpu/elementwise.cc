#include "kernels/cpu/elementwise.h"

namespace shardlm::kernels {
namespace {

// The loop for `isa`: the AVX-512 or the AVX2 one; nullptr for scalar CPUs,
// where the callers keep their own loops.
template <typename Fn>
Fn ForIsa(Isa isa, Fn avx512, Fn avx2) {
  switch (isa) {
    case Isa::kAvx512:
      return avx512;
    case Isa::kAvx2:
      return avx2;
    case Isa::kScalar:
      break;
  }
  return nullptr;
}

}  // namespace

SiluMulF32Fn SiluMulF32Kernel(Isa isa) {
  return ForIsa(isa, internal::SiluMulF32Avx512, internal::SiluMulF32Avx2);
}
SiluMulBf16Fn SiluMulBf16Kernel(Isa isa) {
  return ForIsa(isa, internal::SiluMulBf16Avx512, internal::SiluMulBf16Avx2);
}
LogSumExpFn LogSumExpKernel(Isa isa) {
  return ForIsa(isa, internal::LogSumExpAvx512, internal::LogSumExpAvx2);
}
ArgMaxFn ArgMaxKernel(Isa isa) { return ForIsa(isa, internal::ArgMaxAvx512, internal::ArgMaxAvx2); }
RmsNormF32Fn RmsNormF32Kernel(Isa isa) {
  return ForIsa(isa, internal::RmsNormF32Avx512, internal::RmsNormF32Avx2);
}
RmsNormBf16Fn RmsNormBf16Kernel(Isa isa) {
  return ForIsa(isa, internal::RmsNormBf16Avx512, internal::RmsNormBf16Avx2);
}
RotaryF32Fn RotaryF32Kernel(Isa isa) {
  return ForIsa(isa, internal::RotaryF32Avx512, internal::RotaryF32Avx2);
}
RotaryBf16Fn RotaryBf16Kernel(Isa isa) {
  return ForIsa(isa, internal::RotaryBf16Avx512, internal::RotaryBf16Avx2);
}
AddF32Fn AddF32Kernel(Isa isa) { return ForIsa(isa, internal::AddF32Avx512, internal::AddF32Avx2); }
AddBf16Fn AddBf16Kernel(Isa isa) { return ForIsa(isa, internal::AddBf16Avx512, internal::AddBf16Avx2); }

}  // namespace shardlm::kernels
