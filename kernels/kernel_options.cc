#include "kernels/kernel_options.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace shardlm::kernels {
namespace {

KernelOptions& Current() {
  static KernelOptions options;
  return options;
}

// A switch that is on unless its variable is 0.
bool SwitchOn(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  return v == nullptr ? fallback : std::string(v) != "0";
}

// An integer variable into *value (left as it is when unset).
absl::Status IntVariable(const char* name, int64_t min, int64_t* value) {
  const char* v = std::getenv(name);
  if (v == nullptr) return absl::OkStatus();
  int64_t parsed = 0;
  if (!absl::SimpleAtoi(v, &parsed) || parsed < min) {
    return absl::InvalidArgumentError(absl::StrCat(name, " must be an integer >= ", min, ", got '", v, "'"));
  }
  *value = parsed;
  return absl::OkStatus();
}

}  // namespace

void SetKernelOptions(const KernelOptions& options) {
  Current() = options;
  CapIsa(options.isa_cap);
}

const KernelOptions& CurrentKernelOptions() { return Current(); }

absl::StatusOr<KernelOptions> KernelOptionsFromEnvironment() {
  KernelOptions o;
  if (const char* isa = std::getenv("SHARDLM_CPU_ISA")) {
    const std::string name = isa;
    if (name == "scalar") {
      o.isa_cap = Isa::kScalar;
    } else if (name == "avx2") {
      o.isa_cap = Isa::kAvx2;
    } else if (name != "avx512") {
      return absl::InvalidArgumentError(
          absl::StrCat("SHARDLM_CPU_ISA must be scalar, avx2 or avx512, got '", name, "'"));
    }
  }
  if (absl::Status st = IntVariable("SHARDLM_GEMV_MAX_ROWS", -1, &o.gemv_max_rows); !st.ok()) return st;
  if (absl::Status st = IntVariable("SHARDLM_POOL_SPIN_US", 0, &o.pool_spin_us); !st.ok()) return st;
  o.step_pool = SwitchOn("SHARDLM_STEP_POOL", o.step_pool);
  o.pack_weights = SwitchOn("SHARDLM_PACK_WEIGHTS", o.pack_weights);
  o.fused_epilogues = SwitchOn("SHARDLM_FUSED_EPILOGUES", o.fused_epilogues);
  return o;
}

absl::Status SetKernelOptionsFromEnvironment() {
  absl::StatusOr<KernelOptions> options = KernelOptionsFromEnvironment();
  if (!options.ok()) return options.status();
  SetKernelOptions(*options);
  // libtorch defaults to one thread per physical core as it counts them,
  // which undercounts here: every core unless OMP_NUM_THREADS says otherwise.
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    at::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  }
  return absl::OkStatus();
}

}  // namespace shardlm::kernels
