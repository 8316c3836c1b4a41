#include "kernels/cpu/elementwise.h"

namespace shardlm::kernels {

SiluMulF32Fn SiluMulF32Kernel(Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::kAvx512) return internal::SiluMulF32Avx512;
#endif
  (void)isa;
  return nullptr;
}

SiluMulBf16Fn SiluMulBf16Kernel(Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::kAvx512) return internal::SiluMulBf16Avx512;
#endif
  (void)isa;
  return nullptr;
}

LogSumExpFn LogSumExpKernel(Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::kAvx512) return internal::LogSumExpAvx512;
#endif
  (void)isa;
  return nullptr;
}

RmsNormF32Fn RmsNormF32Kernel(Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::kAvx512) return internal::RmsNormF32Avx512;
#endif
  (void)isa;
  return nullptr;
}

RmsNormBf16Fn RmsNormBf16Kernel(Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::kAvx512) return internal::RmsNormBf16Avx512;
#endif
  (void)isa;
  return nullptr;
}

RotaryF32Fn RotaryF32Kernel(Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::kAvx512) return internal::RotaryF32Avx512;
#endif
  (void)isa;
  return nullptr;
}

RotaryBf16Fn RotaryBf16Kernel(Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::kAvx512) return internal::RotaryBf16Avx512;
#endif
  (void)isa;
  return nullptr;
}

AddF32Fn AddF32Kernel(Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::kAvx512) return internal::AddF32Avx512;
#endif
  (void)isa;
  return nullptr;
}

AddBf16Fn AddBf16Kernel(Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::kAvx512) return internal::AddBf16Avx512;
#endif
  (void)isa;
  return nullptr;
}

}  // namespace shardlm::kernels
