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
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
#endif
  return Isa::kScalar;
}

Isa FromEnvironment(Isa detected) {
  const char* env = std::getenv("SHARDLM_CPU_ISA");
  if (env == nullptr) return detected;
  Isa wanted = detected;
  if (std::strcmp(env, "scalar") == 0) wanted = Isa::kScalar;
  if (std::strcmp(env, "avx2") == 0) wanted = Isa::kAvx2;
  if (std::strcmp(env, "avx512") == 0) wanted = Isa::kAvx512;
  return wanted < detected ? wanted : detected;
}

std::atomic<int>& Active() {
  static std::atomic<int> active{static_cast<int>(FromEnvironment(DetectedIsa()))};
  return active;
}

}  // namespace

Isa DetectedIsa() {
  static const Isa detected = Detect();
  return detected;
}

Isa ActiveIsa() { return static_cast<Isa>(Active().load(std::memory_order_relaxed)); }

Isa SetIsaForTesting(Isa isa) {
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
