#include "kernels/cpu/attention.h"

namespace shardlm::kernels {
namespace {

bool Takes(int64_t d) { return d > 0 && d % 16 == 0 && d <= 256; }

}  // namespace

DecodeAttentionF32Fn DecodeAttentionF32(Isa isa, int64_t d) {
#if defined(__x86_64__)
  if (isa == Isa::kAvx512 && Takes(d)) return internal::DecodeAttentionF32Avx512;
  if (isa == Isa::kAvx2 && Takes(d)) return internal::DecodeAttentionF32Avx2;
#endif
  (void)isa;
  (void)d;
  return nullptr;
}

DecodeAttentionBf16Fn DecodeAttentionBf16(Isa isa, int64_t d) {
#if defined(__x86_64__)
  if (isa == Isa::kAvx512 && Takes(d)) return internal::DecodeAttentionBf16Avx512;
  if (isa == Isa::kAvx2 && Takes(d)) return internal::DecodeAttentionBf16Avx2;
#endif
  (void)isa;
  (void)d;
  return nullptr;
}

}  // namespace shardlm::kernels
