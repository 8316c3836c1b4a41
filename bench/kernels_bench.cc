// The step's kernels alone, each next to its limit measured in this run:
//
// - the projections: kernels::Linear (GEMV for small batches, ATen's GEMM
//   beyond) on a weight as large as the benchmark model's, at each batch
//   size, next to the read-bandwidth floor and ATen's own matmul on the same
//   operands. Used to choose the GEMV cut-over (kernels/linear.h) and the row
//   grouping of cpu/gemv_avx512.cc;
// - with --ops, the rest of a decode step of the benchmark model's shape
//   (12 layers, 12 query / 4 KV heads of 64, hidden 768, intermediate 2048):
//   paged decode attention over `--context` keys per sequence, next to the
//   time its K and V bytes take to read, and the element-wise kernels
//   (two RMSNorms, rotary, two residual adds, SiLU x up per layer).
//
// - with --dispatch, only what starting one parallel loop costs: an empty run
//   on every thread through the step pool (kernels::ParallelFor), through
//   at::parallel_for, and as an empty `#pragma omp parallel` region, each
//   round's mean over many runs (docs/cpu_kernels.md, "The step thread pool").
//
//   build/shardlm_kernels_bench [--rows 1,2,4,8,16,32] [--mb 400 | --model-shapes] [--ops] [--context 160]
//   build/shardlm_kernels_bench --dispatch
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/machine_limits.h"
#include "cli/flags.h"
#include "common/openmp_env.h"
#include "kernels/attention.h"
#include "kernels/cpu/isa.h"
#include "kernels/fused.h"
#include "kernels/kernel_options.h"
#include "kernels/linear.h"
#include "kernels/parallel.h"

namespace shardlm {
namespace {

using Clock = std::chrono::steady_clock;

// The fastest of `reps` runs of fn(), in seconds.
template <typename Fn>
double Best(int reps, Fn&& fn) {
  double best = 1e30;
  for (int rep = 0; rep < reps; ++rep) {
    auto t0 = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

// One decode step's attention and element-wise kernels, for each batch size
// in `rows` (see the file comment). Each layer has its own KV pool layer, so
// a step reads every layer's keys as the model's step does.
void BenchStepOps(const std::vector<int32_t>& rows, int64_t context, double bw) {
  constexpr int64_t kLayers = 12, kHeads = 12, kKvHeads = 4, kD = 64, kHidden = 768, kInter = 2048;
  constexpr int64_t kBlock = 16;
  std::printf(
      "\n| dtype | batch | context | attention ms | cold KV ms | KV MB read | KV read ms | attention / KV "
      "read | "
      "element-wise ms | element-wise MB | element-wise / its bytes "
      "|\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const int64_t elem = dtype == at::kFloat ? 4 : 2;
    for (int32_t batch : rows) {
      const int64_t blocks_per_seq = (context + kBlock - 1) / kBlock;
      const int64_t blocks = batch * blocks_per_seq;
      at::Tensor k_pool = at::rand({kLayers, blocks, kBlock, kKvHeads, kD}).sub(0.5).to(dtype);
      at::Tensor v_pool = at::rand({kLayers, blocks, kBlock, kKvHeads, kD}).sub(0.5).to(dtype);
      // Each sequence's blocks are spread through the pool, as after many
      // requests have come and gone.
      std::vector<int32_t> tables(batch * blocks_per_seq);
      for (int64_t i = 0; i < blocks; ++i) tables[i] = static_cast<int32_t>((i * 7919) % blocks);
      std::vector<int32_t> positions(batch, static_cast<int32_t>(context - 1)), seq_of_token(batch);
      for (int32_t b = 0; b < batch; ++b) seq_of_token[b] = b;
      AttentionBatch ab;
      ab.positions = &positions;
      ab.seq_of_token = &seq_of_token;
      ab.block_tables = tables.data();
      ab.max_blocks = blocks_per_seq;
      ab.block_size = kBlock;
      at::Tensor q = at::rand({batch, kHeads, kD}).sub(0.5).to(dtype);
      std::vector<at::Tensor> k_layers, v_layers;
      for (int64_t l = 0; l < kLayers; ++l) {
        k_layers.push_back(k_pool.select(0, l));
        v_layers.push_back(v_pool.select(0, l));
      }
      const double attention = Best(20, [&] {
        for (int64_t l = 0; l < kLayers; ++l) PagedAttention(q, k_layers[l], v_layers[l], ab);
      });
      // The same, with the KV pool evicted from the caches first, as in a
      // step, where every layer's weights stream through between its
      // attention calls.
      at::Tensor evict = at::ones({32 << 20}, at::kFloat);  // 128 MB
      double cold = 1e30;
      for (int rep = 0; rep < 10; ++rep) {
        evict.add_(1.0);
        cold = std::min(cold, Best(1, [&] {
                          for (int64_t l = 0; l < kLayers; ++l)
                            PagedAttention(q, k_layers[l], v_layers[l], ab);
                        }));
      }
      const double kv_bytes = 2.0 * kLayers * batch * context * kKvHeads * kD * elem;

      // The element-wise kernels of 12 layers, on the step's own shapes.
      at::Tensor x = at::rand({batch, kHidden}).to(dtype), y = at::rand({batch, kHidden}).to(dtype);
      at::Tensor norm_w = at::rand({kHidden}).to(dtype);
      at::Tensor qkv = at::rand({batch, (kHeads + 2 * kKvHeads) * kD}).to(dtype);
      at::Tensor gate_up = at::rand({batch, 2 * kInter}).to(dtype);
      at::Tensor cos = at::rand({batch, kD / 2}), sin = at::rand({batch, kD / 2});
      const double elementwise = Best(20, [&] {
        for (int64_t l = 0; l < kLayers; ++l) {
          kernels::RmsNorm(x, norm_w, 1e-5);
          kernels::RotaryInPlace(qkv, kHeads + kKvHeads, kD, cos, sin);
          kernels::AddInPlace(x, y);
          kernels::RmsNorm(x, norm_w, 1e-5);
          kernels::SiluMul(gate_up);
          kernels::AddInPlace(x, y);
        }
      });
      // Bytes each kernel reads and writes once: norm 2x, add 3x the
      // hidden row; rotary 2x the q and k heads; SiLU x up 3x the
      // intermediate row.
      const double ew_bytes = static_cast<double>(kLayers) * batch * elem *
                              (2 * 2 * kHidden + 2 * 3 * kHidden + 2 * (kHeads + kKvHeads) * kD + 3 * kInter);
      std::printf("| %s | %d | %lld | %.3f | %.3f | %.2f | %.3f | %.1fx | %.3f | %.2f | %.1fx |\n",
                  dtype == at::kFloat ? "f32" : "bf16", batch, static_cast<long long>(context),
                  attention * 1e3, cold * 1e3, kv_bytes / 1e6, kv_bytes / bw * 1e3,
                  attention / (kv_bytes / bw), elementwise * 1e3, ew_bytes / 1e6,
                  elementwise / (ew_bytes / bw));
      std::fflush(stdout);
    }
  }
}

// Microseconds per empty parallel run on every thread, five rounds of
// `runs` each, through the step pool, at::parallel_for and an OpenMP region.
void BenchDispatch() {
  const int threads = at::get_num_threads();
  constexpr int kRuns = 20000, kRounds = 5;
  std::atomic<int64_t> sink{0};
  auto time_runs = [&](auto&& one) {
    for (int i = 0; i < 1000; ++i) one();  // warm: threads started and spinning
    auto t0 = Clock::now();
    for (int i = 0; i < kRuns; ++i) one();
    return 1e6 * std::chrono::duration<double>(Clock::now() - t0).count() / kRuns;
  };
  auto body = [&](int64_t b, int64_t e) { sink.fetch_add(e - b, std::memory_order_relaxed); };
  std::printf("\n| %d threads, an empty run on each | round us per run | median |\n|---|---|---|\n", threads);
  auto report = [&](const char* what, auto&& one) {
    std::vector<double> us;
    for (int r = 0; r < kRounds; ++r) us.push_back(time_runs(one));
    std::string cells;
    for (double u : us) absl::StrAppendFormat(&cells, "%s%.2f", cells.empty() ? "" : ", ", u);
    std::vector<double> sorted = us;
    std::sort(sorted.begin(), sorted.end());
    std::printf("| %s | %s | %.2f |\n", what, cells.c_str(), sorted[kRounds / 2]);
  };
  report("step pool (kernels::ParallelFor)", [&] { kernels::ParallelFor(0, threads, 1, body); });
  report("at::parallel_for", [&] { at::parallel_for(0, threads, 1, body); });
  report("#pragma omp parallel", [&] {
#pragma omp parallel
    sink.fetch_add(1, std::memory_order_relaxed);
  });
  if (sink.load() == 0) std::printf("(nothing ran)\n");
}

int Main(int argc, char** argv) {
  std::string row_list;
  int64_t mb = 0, k = 0, context = 0;
  bool ops = false, only_ops = false, model_shapes = false, dispatch = false;
  FlagSet f("kernels_bench");
  f.String("rows", "comma-separated activation rows (batch sizes)", false, "1,2,4,8,16,32").To(&row_list);
  f.Int("mb", "weight megabytes per dtype-f32 matrix set (halved for bf16)", 400, 16, 4096).To(&mb);
  f.Int("k", "input features", 768, 16, 16384).To(&k);
  f.Bool("ops", "also time a decode step's attention and element-wise kernels (the model's shape)").To(&ops);
  f.Int("context", "keys per sequence for --ops' attention", 160, 1, 65536).To(&context);
  f.Bool("only-ops", "time only --ops' kernels, not the projections").To(&only_ops);
  f.Bool("model-shapes",
         "the projections of a decode step of the benchmark model instead of [4k, k] matrices")
      .To(&model_shapes);
  f.Bool("dispatch", "time only what starting a parallel loop costs (step pool, at::parallel_for, OpenMP)")
      .To(&dispatch);
  int exit_code = 0;
  if (!ParseArguments(f, argc, argv, 1, "", 0, &exit_code)) return exit_code;
  if (dispatch) {
    BenchDispatch();
    return 0;
  }
  std::vector<int32_t> rows;
  ParseIdList("rows", row_list, &rows).IgnoreError();
  const double bw = bench::ReadBandwidth();
  std::printf("isa %s, %d threads, read bandwidth %.1f GB/s\n",
              kernels::IsaName(kernels::ActiveIsa()).c_str(), at::get_num_threads(), bw / 1e9);
  if (only_ops) {
    BenchStepOps(rows, context, bw);
    return 0;
  }
  std::printf(
      "\n| dtype | rows | weight MB | kernels::Linear ms | at::linear ms | floor ms | Linear / floor | "
      "Linear GFLOP/s |\n|---|---|---|---|---|---|---|---|\n");
  // The weights: [4 k, k] matrices together `mb` MB in f32, or with
  // --model-shapes a decode step's own (12 layers of qkv, o, gate_up and down,
  // then the LM head, of the benchmark model).
  std::vector<std::pair<int64_t, int64_t>> shapes;  // [n, k] each
  if (model_shapes) {
    for (int layer = 0; layer < 12; ++layer) {
      for (auto shape : {std::pair<int64_t, int64_t>{1280, 768}, {768, 768}, {4096, 768}, {768, 2048}})
        shapes.push_back(shape);
    }
    shapes.push_back({32000, 768});
  } else {
    const int64_t count = std::max<int64_t>(1, (mb << 20) / (4 * 4 * k * k));
    shapes.assign(count, {4 * k, k});
  }
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const int64_t elem = dtype == at::kFloat ? 4 : 2;
    std::vector<at::Tensor> ws;
    std::vector<kernels::LinearWeight> prepared;  // as the model holds them (packed on AVX2 and AVX-512)
    double elements = 0;
    for (auto [n, kk] : shapes) {
      ws.push_back(at::rand({n, kk}).sub(0.5).to(dtype));
      prepared.push_back(kernels::LinearWeight::Prepare(ws.back().clone()));
      elements += static_cast<double>(n * kk);
    }
    const double bytes = elements * elem;
    for (int32_t m : rows) {
      // One activation per input width.
      at::Tensor x768 = at::rand({m, 768}).to(dtype), xk = at::rand({m, k}).to(dtype),
                 x2048 = at::rand({m, 2048}).to(dtype);
      auto input = [&](int64_t kk) -> const at::Tensor& { return kk == k ? xk : kk == 768 ? x768 : x2048; };
      const double mine = Best(5, [&] {
        for (const auto& w : prepared) kernels::Linear(input(w.in_features()), w);
      });
      const double aten = Best(5, [&] {
        for (const auto& w : ws) at::linear(input(w.size(1)), w);
      });
      const double floor = bytes / bw;
      std::printf("| %s | %d | %.0f | %.2f | %.2f | %.2f | %.2fx | %.1f |\n",
                  dtype == at::kFloat ? "f32" : "bf16", m, bytes / 1e6, mine * 1e3, aten * 1e3, floor * 1e3,
                  mine / floor, 2.0 * m * elements / mine / 1e9);
      std::fflush(stdout);
    }
  }
  std::printf("\nATen GEMM (1024x2048x2048): f32 %.1f GFLOP/s, bf16 %.1f GFLOP/s\n",
              bench::GemmFlops(at::kFloat) / 1e9, bench::GemmFlops(at::kBFloat16) / 1e9);
  if (ops) BenchStepOps(rows, context, bw);
  return 0;
}

}  // namespace
}  // namespace shardlm

int main(int argc, char** argv) {
  shardlm::UseShortOpenMpSpin(argv);  // may run this binary again (common/openmp_env.h)
  if (absl::Status st = shardlm::kernels::SetKernelOptionsFromEnvironment(); !st.ok()) {
    std::fprintf(stderr, "%s: %s\n", argv[0], std::string(st.message()).c_str());
    return 2;
  }
  return shardlm::Main(argc, argv);
}
