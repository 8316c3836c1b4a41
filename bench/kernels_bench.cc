// The projection kernels alone: kernels::Linear (GEMV for small batches,
// ATen's GEMM beyond) on a weight as large as the benchmark model's, at each
// batch size, next to the read-bandwidth floor and ATen's own matmul on the
// same operands, measured in this run. Used to choose the GEMV cut-over
// (kernels/linear.h) and the row grouping of cpu/gemv_avx512.cc.
//
//   build/shardlm_kernels_bench [--rows 1,2,4,8,16,32] [--mb 400]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "bench/machine_limits.h"
#include "cli/flags.h"
#include "common/openmp_env.h"
#include "kernels/cpu/isa.h"
#include "kernels/linear.h"

namespace shardlm {
namespace {

using Clock = std::chrono::steady_clock;

int Main(int argc, char** argv) {
  FlagSet f("kernels_bench");
  f.String("rows", "comma-separated activation rows (batch sizes)", false, "1,2,4,8,16,32");
  f.Int("mb", "weight megabytes per dtype-f32 matrix set (halved for bf16)", 400, 16, 4096);
  f.Int("k", "input features", 768, 16, 16384);
  absl::Status st = f.Parse(argc, argv, 1);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
    return 2;
  }
  std::vector<int32_t> rows;
  ParseIdList("rows", f.GetString("rows"), &rows).IgnoreError();
  const int64_t k = f.GetInt("k");
  const double bw = bench::ReadBandwidth();
  std::printf("isa %s, %d threads, read bandwidth %.1f GB/s\n",
              kernels::IsaName(kernels::ActiveIsa()).c_str(), at::get_num_threads(), bw / 1e9);
  std::printf(
      "\n| dtype | rows | weight MB | kernels::Linear ms | at::linear ms | floor ms | Linear / floor | "
      "Linear GFLOP/s |\n|---|---|---|---|---|---|---|---|\n");
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    // Several matrices, as a model's layers: [4 * k, k] each, together `mb` MB in f32.
    const int64_t elem = dtype == at::kFloat ? 4 : 2;
    const int64_t n = 4 * k;
    const int64_t count = std::max<int64_t>(1, (f.GetInt("mb") << 20) / (4 * n * k));
    std::vector<at::Tensor> ws;
    std::vector<kernels::LinearWeight> prepared;  // as the model holds them (packed on AVX-512)
    for (int64_t i = 0; i < count; ++i) {
      ws.push_back(at::rand({n, k}).sub(0.5).to(dtype));
      prepared.push_back(kernels::LinearWeight::Prepare(ws.back().clone()));
    }
    const double bytes = static_cast<double>(count * n * k * elem);
    for (int32_t m : rows) {
      at::Tensor x = at::rand({m, k}).to(dtype);
      auto time = [&](const auto& weights, auto fn) {
        double best = 1e30;
        for (int rep = 0; rep < 5; ++rep) {
          auto t0 = Clock::now();
          for (const auto& w : weights) fn(w);
          best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
        }
        return best;
      };
      const double mine = time(prepared, [&](const kernels::LinearWeight& w) { kernels::Linear(x, w); });
      const double aten = time(ws, [&](const at::Tensor& w) { at::linear(x, w); });
      const double floor = bytes / bw;
      std::printf("| %s | %d | %.0f | %.2f | %.2f | %.2f | %.2fx | %.1f |\n",
                  dtype == at::kFloat ? "f32" : "bf16", m, bytes / 1e6, mine * 1e3, aten * 1e3, floor * 1e3,
                  mine / floor, 2.0 * m * bytes / elem / mine / 1e9);
      std::fflush(stdout);
    }
  }
  std::printf("\nATen GEMM (1024x2048x2048): f32 %.1f GFLOP/s, bf16 %.1f GFLOP/s\n",
              bench::GemmFlops(at::kFloat) / 1e9, bench::GemmFlops(at::kBFloat16) / 1e9);
  return 0;
}

}  // namespace
}  // namespace shardlm

int main(int argc, char** argv) {
  shardlm::UseShortOpenMpSpin(argv);  // may run this binary again (common/openmp_env.h)
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    at::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  }
  return shardlm::Main(argc, argv);
}
