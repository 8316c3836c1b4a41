// Single-rank engine benchmark: prefill and decode throughput at several
// batch sizes, in f32 and bf16, next to the memory-bandwidth floor measured in
// the same run.
//
//   build/shardlm_bench --model-dir build/bench-model          # makes the model if missing
//
// Floor: a decode step streams every weight once, so its time is at least
// weight bytes / read bandwidth, the rate at which all threads stream a large
// buffer (bench/machine_limits.h), measured here. A memcpy's bytes-copied
// rate is not that: a copy moves every byte twice. Beside it: a plain C GEMV
// over as many bytes (what simple code achieves), and ATen's GEMM rate on
// large products (the ceiling for prefill and large batches).
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/machine_limits.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/logging.h"
#include "common/openmp_env.h"
#include "common/random_token.h"
#include "coordinator/engine/engine.h"
#include "coordinator/engine/engine_runner.h"
#include "coordinator/group/worker_group.h"
#include "formats/gguf.h"
#include "formats/tiny_model.h"
#include "kernels/cpu/isa.h"
#include "kernels/cuda_attention.h"
#include "kernels/cuda_fused.h"
#include "kernels/kernel_options.h"
#include "kernels/step_profile.h"
#include "model/device.h"
#include "worker/rank_worker.h"

namespace shardlm {
namespace {

// Engine options with `tokens` per step, the rest as their defaults.
Engine::Options BatchTokens(int64_t tokens) {
  Engine::Options o;
  o.max_batch_tokens = tokens;
  return o;
}

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

EngineRequest Request(int32_t prompt_len, int32_t new_tokens, int32_t salt, int64_t vocab) {
  EngineRequest r;
  for (int32_t i = 0; i < prompt_len; ++i)
    r.prompt.push_back(static_cast<int32_t>((i * 7919 + salt * 104729) % vocab));
  r.max_new_tokens = new_tokens;
  r.sampling.temperature = 0.0f;
  r.ignore_eos = true;
  return r;
}

struct Row {
  std::string dtype;
  int batch;
  double prefill_tok_s;
  double decode_tok_s;
  double step_ms;
  double coordinator_ms;       // per step: planning and applying it (the scheduler, the engine's state)
  kernels::StepProfile parts;  // per step, seconds (kernels/step_profile.h)
  double prefill_ms;           // the whole prefill of `batch` prompts
  kernels::StepProfile prefill_parts;  // over that prefill, seconds
  double read_bw;                      // bytes/s, probed right after the decode steps
  int64_t step_bytes;                  // what a decode step reads: weights, embedding rows, KV
};

// Decode step latency through N worker processes, split into rank 0's
// compute, its time in collectives, and what the coordinator adds (encode,
// RPC fan-out, waiting for every rank, decode); then the same decode with
// overlapped steps (docs/scheduler.md), as serve's engine loop runs it: the
// next step planned and queued on the workers while one runs. Medians of 3
// alternating runs of each.
// --weights and --kv-dtype, as every engine here is given them.
void BenchTensorParallel(const std::string& dir, const std::string& exe, const std::vector<int32_t>& tps,
                         const std::vector<int32_t>& batches, int32_t steps, const std::string& dtype,
                         const StorageFlags& storage) {
  std::printf(
      "\n| dtype | tp | batch | step ms | rank-0 compute ms | collectives ms | coordinator+RPC ms | overhead "
      "| "
      "overlapped step ms | overlapped / step | worker RSS MB |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int32_t tp : tps) {
    WorkerGroupOptions go;
    go.model_dir = dir;
    go.tp = tp;
    go.dtype = dtype;
    go.weights = storage.weights;
    go.kv_dtype = storage.kv_dtype;
    go.kv_cache_bytes = 256ll << 20;
    go.exe = exe;
    go.worker_log_level = 1;
    go.internal_token = RandomToken();
    auto group = WorkerGroup::Start(go);
    if (!group.ok()) {
      std::fprintf(stderr, "tp %d: %s\n", tp, std::string(group.status().message()).c_str());
      continue;
    }
    RemoteExecutor* exec = (*group)->executor();
    auto cfg = LoadModelConfig(dir);
    double rss = 0;
    for (const auto& r : exec->ranks()) rss = std::max(rss, r.resident_bytes() / 1e6);
    for (int32_t batch : batches) {
      Engine engine(exec, *cfg, exec->num_blocks(), exec->block_size(), BatchTokens(4096));
      EngineRunner runner(&engine);
      runner.Run(Request(16, 2, 99, cfg->vocab_size)).IgnoreError();  // warm-up
      // Step by step: ms per step, and the parts of it (summed).
      auto step_by_step = [&](double* worker, double* coll) {
        for (int32_t b = 0; b < batch; ++b)
          engine.Submit(Request(16, steps + 1, b + 1000, cfg->vocab_size)).IgnoreError();
        runner.Step().IgnoreError();  // prefill, not timed
        double wall = 0;
        int32_t done = 0;
        while (!engine.Idle() && done < steps) {
          auto t0 = Clock::now();
          runner.Step().IgnoreError();
          wall += Seconds(t0, Clock::now());
          const StepTiming t = exec->last_timing();
          *worker += t.worker_us / 1e3;
          *coll += t.collective_us / 1e3;
          ++done;
        }
        while (!engine.Idle()) runner.Step().IgnoreError();
        *worker /= std::max(1, done);
        *coll /= std::max(1, done);
        return 1e3 * wall / std::max(1, done);
      };
      // Overlapped, as serve's engine loop runs steps: ms per step.
      auto overlapped = [&] {
        for (int32_t b = 0; b < batch; ++b)
          engine.Submit(Request(16, steps + 2, b + 1000, cfg->vocab_size)).IgnoreError();
        runner.Step().IgnoreError();            // prefill, not timed
        runner.StepOverlapped().IgnoreError();  // the first step queued, not timed
        int32_t done = 0;
        const auto t0 = Clock::now();
        for (; !engine.Idle() && done < steps; ++done) runner.StepOverlapped().IgnoreError();
        const double ms = 1e3 * Seconds(t0, Clock::now()) / std::max(1, done);
        while (!engine.Idle()) runner.StepOverlapped().IgnoreError();
        return ms;
      };
      // This VM's speed drifts within seconds: the two alternate, 3 times
      // each, and the medians are printed.
      std::vector<double> step_ms, worker_ms, coll_ms, overlapped_ms;
      for (int rep = 0; rep < 3; ++rep) {
        double worker = 0, coll = 0;
        step_ms.push_back(step_by_step(&worker, &coll));
        worker_ms.push_back(worker);
        coll_ms.push_back(coll);
        overlapped_ms.push_back(overlapped());
      }
      auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      const double step = median(step_ms), worker = median(worker_ms), coll = median(coll_ms);
      const double over = median(overlapped_ms);
      const double overhead = step - worker;
      std::printf("| %s | %d | %d | %.2f | %.2f | %.2f | %.2f | %.1f%% | %.2f | %.2f | %.0f |\n",
                  dtype.c_str(), tp, batch, step, worker - coll, coll, overhead, 100.0 * overhead / step,
                  over, over / step, rss);
      std::fflush(stdout);
    }
  }
}

// Time to first token of a 1000-token prompt whose first 900 tokens are
// cached (automatic prefix caching, and an explicit prefix handle), against
// the same prompt cold. In-process, one rank.
void BenchCachedPrefix(const std::string& dir, const std::string& dtype, const StorageFlags& storage) {
  RankWorkerOptions wo;
  wo.model_dir = dir;
  if (!SetRankStorage(dtype, storage.weights, storage.kv_dtype, &wo).ok()) return;
  wo.kv_cache_bytes = 1ll << 30;
  auto worker = RankWorker::Load(wo, MakeSingleRankCommunicator());
  if (!worker.ok()) return;
  RankWorker& w = **worker;
  const int64_t vocab = w.config().vocab_size;
  auto ttft = [&](Engine& engine, EngineRequest r) {
    auto t0 = Clock::now();
    EngineRunner(&engine).Run(std::move(r)).IgnoreError();
    return 1e3 * Seconds(t0, Clock::now());
  };
  Engine engine(&w, w.config(), static_cast<int32_t>(w.num_blocks()), static_cast<int32_t>(w.block_size()),
                BatchTokens(4096));
  EngineRunner runner(&engine);
  runner.Run(Request(16, 1, 99, vocab)).IgnoreError();  // warm-up
  EngineRequest full = Request(1000, 1, 7, vocab);
  EngineRequest other = Request(1000, 1, 8, vocab);  // same length, nothing cached
  const double cold = ttft(engine, other);
  EngineRequest prefix = full;
  prefix.prompt.resize(900);
  prefix.max_new_tokens = 0;
  prefix.keep_handle = true;
  auto pre = runner.Run(prefix);
  // 896 tokens (56 full blocks) come from the prefix cache the prefill published.
  const double cached = ttft(engine, full);
  EngineRequest from_handle = full;
  from_handle.prompt.erase(from_handle.prompt.begin(), from_handle.prompt.begin() + 900);
  from_handle.prefix_handle = pre.ok() ? pre->handle : "";
  const double handle = ttft(engine, from_handle);
  std::printf("\n| %s, 1000-token prompt | time to first token ms | vs cold |\n|---|---|---|\n",
              dtype.c_str());
  std::printf("| cold | %.1f | 100%% |\n", cold);
  std::printf("| first 900 tokens in the prefix cache | %.1f | %.1f%% |\n", cached, 100.0 * cached / cold);
  std::printf("| first 900 tokens from a Prefill handle | %.1f | %.1f%% |\n", handle, 100.0 * handle / cold);
  std::fflush(stdout);
}

// Where each batch's decode step (or its whole prefill: its prompts, one
// token each) went, by part (kernels/step_profile.h); "other" is the rest:
// tensor set-up, allocation, cos/sin, the engine's work.
void PrintBreakdown(const std::vector<Row>& rows, bool prefill) {
  std::printf(
      "\n| dtype | batch | %s ms | projections ms | attention ms | norms, rotary, adds ms | sampling ms | "
      "other ms | outside projections |\n|---|---|---|---|---|---|---|---|---|\n",
      prefill ? "prefill" : "step");
  const int digits = prefill ? 1 : 2;
  for (const Row& r : rows) {
    using kernels::StepPart;
    const kernels::StepProfile& p = prefill ? r.prefill_parts : r.parts;
    const double total = prefill ? r.prefill_ms : r.step_ms;
    const double proj = 1e3 * p[StepPart::kProjections], attn = 1e3 * p[StepPart::kAttention];
    const double elem = 1e3 * p[StepPart::kElementwise], samp = 1e3 * p[StepPart::kSampling];
    const double other = total - proj - attn - elem - samp - 1e3 * p[StepPart::kCollectives];
    std::printf("| %s | %d | %.*f | %.*f | %.*f | %.*f | %.*f | %.*f | %.1f%% |\n", r.dtype.c_str(), r.batch,
                digits, total, digits, proj, digits, attn, digits, elem, digits, samp, digits, other,
                100 * (total - proj) / total);
  }
}

// The benchmark's settings, each bound to its flag where it is declared.
struct BenchFlags {
  std::string model_dir;
  int32_t prompt_len = 0;
  int32_t decode_steps = 0;
  int32_t decode_context = 0;
  std::string batches;
  std::string dtypes;
  StorageFlags storage;
  std::string tp;
  std::string shardlm;
  bool ttft = false;
  std::string device;
  std::string shape;
  int64_t kv_cache_mb = 0;
  int64_t cuda_graph_max_batch = 0;
  bool no_cuda_fused = false;
  int64_t cuda_gemv_max_rows = 0;
  int cuda_attention_max_splits = 0;
};

void DeclareFlags(FlagSet& f, BenchFlags* o) {
  f.String("model-dir", "benchmark checkpoint directory (written if missing) or a .gguf file", false,
           "build/bench-model")
      .To(&o->model_dir);
  f.Int("prompt-len", "prompt tokens per sequence for prefill", 128, 1, 8192).To(&o->prompt_len);
  f.Int("decode-steps", "decode steps timed per batch", 32, 2, 4096).To(&o->decode_steps);
  f.Int("decode-context",
        "prompt tokens of each sequence before its timed decode steps (the context decode "
        "attends over)",
        16, 1, 131072)
      .To(&o->decode_context);
  f.String("batches", "comma-separated batch sizes", false, "1,8,32").To(&o->batches);
  f.String("dtypes", "comma-separated compute dtypes", false, "f32,bf16").To(&o->dtypes);
  AddStorageFlags(f, &o->storage);  // rows are labelled DTYPE/WEIGHTS when --weights is given
  f.String("tp", "also time decode steps through worker processes at these tp sizes (e.g. 1,2)", false, "")
      .To(&o->tp);
  f.String("shardlm", "the shardlm binary that runs the workers (default: next to this one)").To(&o->shardlm);
  f.Bool("ttft", "also time the first token of a 1000-token prompt with a 900-token cached prefix")
      .To(&o->ttft);
  f.String(
       "device",
       "the engine's device (cpu, cuda, cuda:N); on a GPU the floor is its read bandwidth (a read-only sum)",
       false, "cpu")
      .To(&o->device);
  f.String("shape", "the model written when --model-dir has none: bench (~100M) or llama3-8b (bf16, random)",
           false, "bench", {"bench", "llama3-8b"})
      .To(&o->shape);
  f.Int("kv-cache-mb", "KV cache budget in MiB", 1024, 1, 1 << 20).To(&o->kv_cache_mb);
  f.Int("cuda-graph-max-batch", "on a GPU, steps of up to this many tokens run on CUDA graphs; 0: eagerly",
        64, 0, 1024)
      .To(&o->cuda_graph_max_batch);
  f.Bool("no-cuda-fused",
         "on a GPU, the element-wise parts through ATen's operators, not the fused kernels "
         "(to measure what those save)")
      .To(&o->no_cuda_fused);
  f.Int("cuda-gemv-max-rows",
        "on a GPU, products of up to this many rows through the few-row kernel, the rest through cuBLAS "
        "(0: all through cuBLAS; to measure what the kernel saves)",
        kernels::kDefaultCudaGemvMaxRows, 0, 8)
      .To(&o->cuda_gemv_max_rows);
  f.Int("cuda-attention-max-splits",
        "on a GPU, at most this many runs of keys per attention row (1: never "
        "split; to measure what split keys save)",
        32, 1, 32)
      .To(&o->cuda_attention_max_splits);
}

int Main(int argc, char** argv) {
  BenchFlags o;
  FlagSet f("bench");
  DeclareFlags(f, &o);
  int exit_code = 0;
  if (!ParseArguments(f, argc, argv, 1, "", 0, &exit_code)) return exit_code;
  const std::string& dir = o.model_dir;
  auto device = ResolveDevice(o.device);
  if (!device.ok()) {
    std::fprintf(stderr, "%s\n", std::string(device.status().message()).c_str());
    return 2;
  }
  const bool gpu = !device->is_cpu();
  kernels::SetCudaFusedKernels(!o.no_cuda_fused);
  kernels::SetCudaGemvMaxRows(o.cuda_gemv_max_rows);
  SetCudaAttentionMaxSplits(o.cuda_attention_max_splits);
  if (!std::filesystem::exists(dir + "/config.json") && o.shape == "llama3-8b") {
    // Llama-3-8B's shapes (GQA 32/8, 128k vocabulary, untied), bf16, random.
    TinyModelOptions o;
    o.arch = Arch::kLlama;
    o.dtype = DType::kBF16;
    o.vocab_size = 128256;
    o.hidden_size = 4096;
    o.num_layers = 32;
    o.num_heads = 32;
    o.num_kv_heads = 8;
    o.intermediate_size = 14336;
    o.max_position_embeddings = 8192;
    o.shards = 4;
    o.fast_random = true;
    std::printf("writing a Llama-3-8B-shaped model to %s\n", dir.c_str());
    absl::Status st = WriteTinyModel(dir, o);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
      return 1;
    }
  }
  if (!IsGgufFile(dir) && !std::filesystem::exists(dir + "/config.json")) {
    // ~100M parameters, Llama-shaped (GQA 12/4 heads), tied embeddings, 32k vocab.
    TinyModelOptions o;
    o.arch = Arch::kLlama;
    o.vocab_size = 32000;
    o.hidden_size = 768;
    o.num_layers = 12;
    o.num_heads = 12;
    o.num_kv_heads = 4;
    o.intermediate_size = 2048;
    o.tie_embeddings = true;
    o.seed = 1;
    std::printf("writing benchmark model to %s\n", dir.c_str());
    absl::Status st = WriteTinyModel(dir, o);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
      return 1;
    }
  }
  const int threads = at::get_num_threads();
  auto read_bandwidth = [&] { return gpu ? bench::DeviceReadBandwidth(*device) : bench::ReadBandwidth(); };
  std::vector<double> probe_rounds;  // the GPU probe's rounds at the start, for its spread
  const double bw = gpu ? bench::DeviceReadBandwidth(*device, &probe_rounds) : bench::ReadBandwidth();
  std::printf("machine: %u hardware threads, torch threads %d, device %s\n",
              std::thread::hardware_concurrency(), threads, device->str().c_str());
  // The instruction set the CPU kernels run (SHARDLM_CPU_ISA may cap it below the CPU's).
  std::printf("cpu kernels: %s (this CPU: %s)\n", kernels::IsaName(kernels::ActiveIsa()).c_str(),
              kernels::IsaName(kernels::DetectedIsa()).c_str());
  if (gpu) {
    std::string spread;
    for (double r : probe_rounds)
      absl::StrAppendFormat(&spread, "%s%.1f", spread.empty() ? "" : ", ", r / 1e9);
    std::printf("read bandwidth (the sum of 2 GiB, read-only; best of rounds %s GB/s): %.1f GB/s\n",
                spread.c_str(), bw / 1e9);
  } else {
    std::printf("read bandwidth (all threads, 1 GiB): %.1f GB/s\n", bw / 1e9);
  }

  std::vector<int32_t> batches, prompt_unused;
  ParseIdList("batches", o.batches, &batches).IgnoreError();
  const int32_t prompt_len = o.prompt_len;
  const int32_t steps = o.decode_steps;
  const int32_t decode_context = o.decode_context;
  std::string dtypes = o.dtypes;
  std::vector<Row> rows;
  std::vector<std::pair<std::string, int64_t>> weight_bytes;
  size_t pos = 0;
  while (!dtypes.empty() && pos <= dtypes.size()) {
    size_t comma = dtypes.find(',', pos);
    if (comma == std::string::npos) comma = dtypes.size();
    const std::string compute = dtypes.substr(pos, comma - pos);
    pos = comma + 1;
    RankWorkerOptions wo;
    wo.model_dir = dir;
    if (absl::Status st = SetRankStorage(compute, o.storage.weights, o.storage.kv_dtype, &wo); !st.ok()) {
      std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
      return 1;
    }
    std::string dtype = f.Has("weights") ? compute + "/" + o.storage.weights : compute;
    if (f.Has("kv-dtype")) dtype += " kv " + o.storage.kv_dtype;
    wo.kv_cache_bytes = o.kv_cache_mb << 20;
    wo.device = *device;
    wo.cuda_graph_max_batch = o.cuda_graph_max_batch;
    auto worker = RankWorker::Load(wo, MakeSingleRankCommunicator());
    if (!worker.ok()) {
      std::fprintf(stderr, "%s\n", std::string(worker.status().message()).c_str());
      return 1;
    }
    RankWorker& w = **worker;
    // The weights a batch-1 step reads (an untied embedding table counts one row).
    weight_bytes.push_back({dtype, w.model().decode_weight_bytes(1)});
    const int64_t vocab = w.config().vocab_size;
    for (int32_t batch : batches) {
      Engine engine(&w, w.config(), static_cast<int32_t>(w.num_blocks()),
                    static_cast<int32_t>(w.block_size()), BatchTokens(4096));
      EngineRunner runner(&engine);
      // Warm-up (first-touch of weights, allocator, thread pool).
      runner.Run(Request(16, 2, 99, vocab)).IgnoreError();
      // Prefill: batch prompts, one new token each.
      kernels::EnableStepProfile(true);
      kernels::TakeStepProfile();
      auto t0 = Clock::now();
      for (int32_t b = 0; b < batch; ++b) engine.Submit(Request(prompt_len, 1, b, vocab)).IgnoreError();
      while (!engine.Idle()) runner.Step().IgnoreError();
      const double prefill_s = Seconds(t0, Clock::now());
      const double prefill = static_cast<double>(batch) * prompt_len / prefill_s;
      const kernels::StepProfile prefill_parts = kernels::TakeStepProfile();
      kernels::EnableStepProfile(false);
      // Decode: prompts of decode_context tokens, then time `steps` decode steps.
      int32_t prefilled = 0;  // sequences past their prompt (their first token sampled)
      for (int32_t b = 0; b < batch; ++b) {
        EngineRequest r = Request(decode_context, steps + 2, b + 1000, vocab);
        r.on_token = [&prefilled, first = true](int32_t, float, const std::vector<TopLogprob>&) mutable {
          if (first) ++prefilled;
          first = false;
        };
        engine.Submit(std::move(r)).IgnoreError();
      }
      while (prefilled < batch && !engine.Idle()) runner.Step().IgnoreError();  // their prefill, not timed
      // Nor the first decode step of this batch size: on a GPU it captures
      // the bucket's CUDA graph (model/step_graphs.h).
      runner.Step().IgnoreError();
      auto t1 = Clock::now();
      int32_t done = 0;
      double coordinator = 0;  // seconds in PlanStep and ApplyStep
      kernels::EnableStepProfile(true);
      kernels::TakeStepProfile();
      while (!engine.Idle() && done < steps) {
        auto p0 = Clock::now();
        auto plan = engine.PlanStep();
        coordinator += Seconds(p0, Clock::now());
        if (!plan) continue;
        auto pending = engine.StartStep(*plan);
        auto results = engine.WaitStep(*plan, *pending);
        auto a0 = Clock::now();
        engine.ApplyStep(*plan, std::move(results)).IgnoreError();
        coordinator += Seconds(a0, Clock::now());
        ++done;
      }
      const double secs = Seconds(t1, Clock::now());
      kernels::StepProfile parts = kernels::TakeStepProfile();
      kernels::EnableStepProfile(false);
      for (double& s : parts.seconds) s /= done;
      while (!engine.Idle()) runner.Step().IgnoreError();
      // This VM's bandwidth drifts by 2x within minutes: each row's floor
      // uses the faster of the start's probe and one taken now.
      const double row_bw = std::max(bw, read_bandwidth());
      // The bytes a step reads: the weights it streams, one embedding row per
      // sequence and each sequence's KV at the steps' mean context.
      const int64_t context = decode_context + done / 2;
      const int64_t step_bytes =
          w.model().decode_weight_bytes(batch) + batch * context * w.kv_bytes_per_token();
      rows.push_back({dtype, batch, prefill, static_cast<double>(batch) * done / secs, 1e3 * secs / done,
                      1e3 * coordinator / done, parts, 1e3 * prefill_s, prefill_parts, row_bw, step_bytes});
      std::fflush(stdout);
    }
  }
  if (o.ttft) BenchCachedPrefix(dir, "f32", o.storage);
  if (!o.tp.empty()) {
    std::vector<int32_t> tps;
    ParseIdList("tp", o.tp, &tps).IgnoreError();
    std::string exe = o.shardlm;
    if (exe.empty()) {
      std::error_code ec;
      exe = (std::filesystem::read_symlink("/proc/self/exe", ec).parent_path() / "shardlm").string();
    }
    SetMinLogLevel(1);
    std::vector<int32_t> tp_batches;
    for (int32_t b : batches) {
      if (b <= 8) tp_batches.push_back(b);
    }
    // The worker processes in each of --dtypes (f32 when it is empty).
    std::vector<std::string> tp_dtypes = absl::StrSplit(o.dtypes, ',', absl::SkipEmpty());
    if (tp_dtypes.empty()) tp_dtypes = {"f32"};
    for (const std::string& dtype : tp_dtypes)
      BenchTensorParallel(dir, exe, tps, tp_batches, steps, dtype, o.storage);
  }
  if (rows.empty()) return 0;
  std::printf(
      "\n| dtype | weights read MB | floor ms (start) | plain C GEMV ms | GEMM GFLOP/s "
      "|\n|---|---|---|---|---|\n");
  std::vector<std::tuple<std::string, double, double>> limits;  // dtype, floor ms, GEMM flop/s
  for (const auto& [d, bytes] : weight_bytes) {
    const at::ScalarType t = d.rfind("bf16", 0) == 0 ? at::kBFloat16 : at::kFloat;
    const double gemm = gpu ? bench::DeviceGemmFlops(*device, t) : bench::GemmFlops(t);
    const double floor_ms = 1e3 * bytes / bw;
    limits.emplace_back(d, floor_ms, gemm);
    if (gpu) {  // the plain C GEMV is a CPU reference
      std::printf("| %s | %.0f | %.2f | - | %.0f |\n", d.c_str(), bytes / 1e6, floor_ms, gemm / 1e9);
      continue;
    }
    const double plain = bench::ReferenceGemvBytesPerSecond(t, bytes);
    std::printf("| %s | %.0f | %.2f | %.2f | %.0f |\n", d.c_str(), bytes / 1e6, floor_ms, 1e3 * bytes / plain,
                gemm / 1e9);
  }
  std::printf(
      "\n| dtype | batch | prefill tok/s | prefill GFLOP/s | vs GEMM | decode tok/s | decode ms/step | floor "
      "ms "
      "| step / floor | decode GFLOP/s | vs GEMM | coordinator ms/step | coordinator share |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    double gemm = 1;
    int64_t bytes = 0;
    for (const auto& [d, f, g] : limits) {
      if (d == r.dtype) gemm = g;
    }
    for (const auto& [d, b] : weight_bytes) {
      if (d == r.dtype) bytes = b;
    }
    const double floor_ms = 1e3 * static_cast<double>(r.step_bytes) / r.read_bw;
    // 2 flops per weight per token (the matrix products; attention is extra).
    const double params = static_cast<double>(bytes) / (r.dtype == "bf16" ? 2 : 4);
    const double prefill_flops = 2 * params * r.prefill_tok_s, decode_flops = 2 * params * r.decode_tok_s;
    std::printf(
        "| %s | %d | %.0f | %.0f | %.0f%% | %.1f | %.2f | %.2f | %.2fx | %.0f | %.0f%% | %.3f | %.1f%% |\n",
        r.dtype.c_str(), r.batch, r.prefill_tok_s, prefill_flops / 1e9, 100 * prefill_flops / gemm,
        r.decode_tok_s, r.step_ms, floor_ms, r.step_ms / floor_ms, decode_flops / 1e9,
        100 * decode_flops / gemm, r.coordinator_ms, 100 * r.coordinator_ms / r.step_ms);
  }
  // On a GPU the parts' timers measure the host's enqueueing, not the kernels.
  if (gpu) return 0;
  PrintBreakdown(rows, /*prefill=*/false);
  PrintBreakdown(rows, /*prefill=*/true);
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
