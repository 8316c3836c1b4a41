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

}  // namespace shardlm::kernels
