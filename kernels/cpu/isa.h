// Which SIMD instruction set the CPU kernels use, chosen once at run time:
// AVX-512 (with AVX512-BF16 for bf16 dot products), else AVX2+FMA+F16C, else
// portable scalar code. CapIsa caps the choice for comparing variants: main
// calls it with KernelOptions::isa_cap (SHARDLM_CPU_ISA), tests directly; it
// never raises the choice above what the CPU has.
//
//   if (ActiveIsa() == Isa::kAvx512) ...
#pragma once

#include <cstdint>
#include <string>

namespace shardlm::kernels {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// The best instruction set this CPU supports (AVX-512 requires F, BW, VL and BF16).
Isa DetectedIsa();
// DetectedIsa() capped by the last CapIsa.
Isa ActiveIsa();
// Caps the active set (never above DetectedIsa()); returns the previous one.
Isa CapIsa(Isa isa);
std::string IsaName(Isa isa);

// bf16 bits <-> float, rounding to nearest even as c10::BFloat16 does.
// `static`: each translation unit keeps its own copy, so the one compiled
// with AVX-512 flags (gemv_avx512.cc) is never the one a linker picks for
// code that runs on any CPU.
static inline float Bf16ToFloat(uint16_t b) {
  union {
    uint32_t u;
    float f;
  } v{static_cast<uint32_t>(b) << 16};
  return v.f;
}
static inline uint16_t FloatToBf16(float f) {
  union {
    float f;
    uint32_t u;
  } v{f};
  if ((v.u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  const uint32_t rounding = ((v.u >> 16) & 1u) + 0x7fffu;
  return static_cast<uint16_t>((v.u + rounding) >> 16);
}

// An element of a float or bf16 (uint16_t bits) array as f32, and an f32
// stored into one (bf16: rounded to nearest even). Same `static` reason.
static inline float ToFloat(float v) { return v; }
static inline float ToFloat(uint16_t b) { return Bf16ToFloat(b); }
static inline void PutFloat(float* p, float v) { *p = v; }
static inline void PutFloat(uint16_t* p, float v) { *p = FloatToBf16(v); }

}  // namespace shardlm::kernels
