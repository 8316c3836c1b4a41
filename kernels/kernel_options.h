// The CPU kernels' switches, for comparing variants (docs/cpu_kernels.md).
// A program's main sets them once, before the first kernel runs; the
// kernels never read the environment themselves. The defaults are what runs
// in production.
//
//   int main(int argc, char** argv) {
//     if (absl::Status st = kernels::SetKernelOptionsFromEnvironment(); !st.ok()) { ...; return 2; }
//     ...
//   }
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/cpu/isa.h"

namespace shardlm::kernels {

struct KernelOptions {
  // Caps the instruction set (never above what the CPU has).
  Isa isa_cap = Isa::kAvx512;
  // Rows up to which products take the GEMV kernels instead of a GEMM;
  // -1: the measured cut-over (kernels/linear.h), 0: never.
  int64_t gemv_max_rows = -1;
  // How long the step pool's idle workers spin before they sleep.
  int64_t pool_spin_us = 100;
  // The step's loops on the step pool (else on ATen's OpenMP regions).
  bool step_pool = true;
  // f32/bf16 weights repacked for the AVX-512 and AVX2 kernels at load.
  bool pack_weights = true;
  // SwiGLU and residual adds fused into the products' epilogues.
  bool fused_epilogues = true;
};

// Sets the switches (the ISA cap takes effect at once; the others are read
// when first used: call before loading a model).
void SetKernelOptions(const KernelOptions& options);
const KernelOptions& CurrentKernelOptions();

// The switches as main reads them from SHARDLM_CPU_ISA (scalar|avx2|avx512),
// SHARDLM_GEMV_MAX_ROWS, SHARDLM_POOL_SPIN_US, SHARDLM_STEP_POOL,
// SHARDLM_PACK_WEIGHTS and SHARDLM_FUSED_EPILOGUES (0 turns a switch off);
// InvalidArgument naming the variable for a value it cannot read.
absl::StatusOr<KernelOptions> KernelOptionsFromEnvironment();
// Both, and libtorch's thread count (every core unless OMP_NUM_THREADS is
// set): what a main calls first.
absl::Status SetKernelOptionsFromEnvironment();

}  // namespace shardlm::kernels
