#include "kernels/cpu/isa.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace shardlm::kernels {
namespace {

Isa Detect() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16")) {
    return Isa::kAvx512;
  }
  // F16C too: the AVX2 quantized kernels widen the blocks' f16 scales with it (every CPU with
  // AVX2 has it, but a VM may show an odd set).
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    return Isa::kAvx2;
  }
#endif
  return Isa::kScalar;
}

std::atomic<int>& Active() {
  static std::atomic<int> active{static_cast<int>(DetectedIsa())};
  return active;
}

}  // namespace

Isa DetectedIsa() {
  static const Isa detected = Detect();
  return detected;
}

Isa ActiveIsa() { return static_cast<Isa>(Active().load(std::memory_order_relaxed)); }

Isa CapIsa(Isa isa) {
  const Isa capped = isa < DetectedIsa() ? isa : DetectedIsa();
  return static_cast<Isa>(Active().exchange(static_cast<int>(capped)));
}

std::string IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kScalar:
      break;
  }
  return "scalar";
}

}  // namespace shardlm::kernels
