// Portable GEMV: the fallback for CPUs without AVX2, and the reference the
// SIMD variants are tested against.
#include "kernels/cpu/gemv.h"

namespace shardlm::kernels {
namespace internal {
namespace {

template <typename T>
void Gemv(const GemvArgs<T>& a, int64_t n_begin, int64_t n_end) {
  for (int64_t n = n_begin; n < n_end; ++n) {
    const T* w = a.w + n * a.k;
    for (int64_t i = 0; i < a.m; ++i) {
      const T* x = a.x + i * a.ldx;
      float s = 0.0f;
      for (int64_t k = 0; k < a.k; ++k) s += ToFloat(x[k]) * ToFloat(w[k]);
      if (a.bias != nullptr) s += ToFloat(a.bias[n]);
      PutFloat(a.y + i * a.ldy + n, s);
    }
  }
}

}  // namespace

void GemvF32Scalar(const GemvArgs<float>& a, int64_t b, int64_t e) { Gemv(a, b, e); }
void GemvBf16Scalar(const GemvArgs<uint16_t>& a, int64_t b, int64_t e) { Gemv(a, b, e); }

float SumF32Scalar(const float* p, int64_t n) {
  float s[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int j = 0; j < 4; ++j) s[j] += p[i + j];
  }
  for (; i < n; ++i) s[0] += p[i];
  return s[0] + s[1] + s[2] + s[3];
}

}  // namespace internal

GemvF32Fn GemvF32(Isa isa) {
  switch (isa) {
#if defined(__x86_64__)
    case Isa::kAvx512:
      return internal::GemvF32Avx512;
    case Isa::kAvx2:
      return internal::GemvF32Avx2;
#endif
    default:
      return internal::GemvF32Scalar;
  }
}

GemvBf16Fn GemvBf16(Isa isa) {
  switch (isa) {
#if defined(__x86_64__)
    case Isa::kAvx512:
      return internal::GemvBf16Avx512;
    case Isa::kAvx2:
      return internal::GemvBf16Avx2;
#endif
    default:
      return internal::GemvBf16Scalar;
  }
}

SumF32Fn SumF32(Isa isa) {
  switch (isa) {
#if defined(__x86_64__)
    case Isa::kAvx512:
      return internal::SumF32Avx512;
    case Isa::kAvx2:
      return internal::SumF32Avx2;
#endif
    default:
      return internal::SumF32Scalar;
  }
}

}  // namespace shardlm::kernels
