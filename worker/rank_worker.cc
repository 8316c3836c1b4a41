#include "worker/rank_worker.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/DeviceGuard.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/step_memory.h"
#include "kernels/cpu/isa.h"
#include "kernels/parallel.h"
#include "kernels/step_profile.h"
#include "model/device.h"
#include "model/device_sampling.h"
#include "model/sampling.h"
#include "step/step_masks.h"

namespace shardlm {
namespace {

// --dtype: kAuto is the checkpoint's (f32 stays f32, the rest computes in bf16).
at::ScalarType ResolveDtype(DtypeChoice choice, const ModelConfig& cfg) {
  switch (choice) {
    case DtypeChoice::kF32:
      return at::kFloat;
    case DtypeChoice::kBf16:
      return at::kBFloat16;
    case DtypeChoice::kAuto:
      break;
  }
  return cfg.torch_dtype == "float32" ? at::kFloat : at::kBFloat16;
}

// --kv-dtype: the compute dtype unless it names another (then on the CPU only:
// the GPU's rotary kernel writes K and V in the compute dtype).
absl::StatusOr<at::ScalarType> ResolveKvDtype(DtypeChoice choice, at::ScalarType compute,
                                              const at::Device& device) {
  const at::ScalarType kv = choice == DtypeChoice::kAuto  ? compute
                            : choice == DtypeChoice::kF32 ? at::kFloat
                                                          : at::kBFloat16;
  if (kv != compute && !device.is_cpu()) {
    return InvalidField("kv_dtype", std::string("--kv-dtype ") + DtypeChoiceName(choice) +
                                        " differs from the compute dtype: the CPU only; on " + device.str() +
                                        " the KV cache has the compute dtype (--dtype)");
  }
  return kv;
}

}  // namespace

absl::StatusOr<DtypeChoice> ParseDtypeChoice(const std::string& value, const std::string& flag) {
  if (value == "auto") return DtypeChoice::kAuto;
  if (value == "f32") return DtypeChoice::kF32;
  if (value == "bf16") return DtypeChoice::kBf16;
  return absl::InvalidArgumentError(flag + " must be auto, f32 or bf16, got '" + value + "'");
}

const char* DtypeChoiceName(DtypeChoice choice) {
  switch (choice) {
    case DtypeChoice::kF32:
      return "f32";
    case DtypeChoice::kBf16:
      return "bf16";
    case DtypeChoice::kAuto:
      break;
  }
  return "auto";
}

absl::Status SetRankStorage(const std::string& dtype, const std::string& weights, const std::string& kv_dtype,
                            RankWorkerOptions* o) {
  SHARDLM_ASSIGN_OR_RETURN(o->dtype, ParseDtypeChoice(dtype, "--dtype"));
  SHARDLM_ASSIGN_OR_RETURN(o->weights, ParseWeightFormat(weights));
  absl::StatusOr<DtypeChoice> kv = ParseDtypeChoice(kv_dtype, "--kv-dtype");
  if (!kv.ok()) return WithField(kv.status(), "kv_dtype");
  o->kv_dtype = *kv;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RankWorker>> RankWorker::Load(const RankWorkerOptions& options,
                                                             std::unique_ptr<Communicator> comm) {
  using Clock = std::chrono::steady_clock;
  using Ms = std::chrono::duration<double, std::milli>;
  const Clock::time_point t0 = Clock::now();
  auto w = std::make_unique<RankWorker>();
  w->comm_ = std::move(comm);
  SHARDLM_ASSIGN_OR_RETURN(ModelConfig cfg, LoadModelConfig(options.model_dir));
  const at::ScalarType dtype = ResolveDtype(options.dtype, cfg);
  const WeightFormat weights = options.weights;
  const at::Device device = options.device;
  SHARDLM_ASSIGN_OR_RETURN(at::ScalarType kv_dtype, ResolveKvDtype(options.kv_dtype, dtype, device));
  // Kernels of our own launch on the current device: make it the rank's on
  // the loading thread (and on the stepping thread, in Execute).
  c10::OptionalDeviceGuard guard;
  if (!device.is_cpu()) guard.reset_device(device);
  SHARDLM_ASSIGN_OR_RETURN(ShardPlan plan, ShardPlan::Make(cfg, w->comm_->rank_info()));
  const Clock::time_point t_config = Clock::now();
  SHARDLM_ASSIGN_OR_RETURN(w->ckpt_, Checkpoint::Open(options.model_dir));
  SHARDLM_ASSIGN_OR_RETURN(w->model_,
                           LlamaModel::Load(cfg, *w->ckpt_, plan, dtype, w->comm_.get(), device, weights));
  w->ckpt_.reset();  // weights are owned copies: unmap the checkpoint
  const Clock::time_point t_weights = Clock::now();
  KvPoolShape shape;
  shape.num_layers = cfg.num_layers;
  shape.block_size = options.block_size;
  shape.num_kv_heads_per_rank = plan.num_kv_heads_per_rank();
  shape.head_dim = cfg.head_dim;
  shape.num_blocks = KvPool::BlocksForBudget(shape, kv_dtype, options.kv_cache_bytes);
  // CUDA graphs point their padding rows at a scratch block past the
  // allocator's.
  const bool graphs = options.cuda_graph_max_batch > 0 && (device.is_cuda() || !options.cuda_graph_capture);
  SHARDLM_ASSIGN_OR_RETURN(w->pool_, KvPool::Create(shape, kv_dtype, device, graphs ? 1 : 0));
  w->options_ = options;
  SHARDLM_RETURN_IF_ERROR(w->MakeGraphs());
  // Weights and the pool are in place: from here on a step's freed
  // activations stay in the heap for the next step (common/step_memory.h).
  RetainStepMemory();
  const Clock::time_point t_pool = Clock::now();
  SHARDLM_RETURN_IF_ERROR(w->Warmup());
  // Where start-up goes (docs/benchmarks.md).
  LOG(INFO) << "rank " << w->comm_->rank_info().rank << " loaded in " << Ms(Clock::now() - t0).count()
            << " ms: config " << Ms(t_config - t0).count() << " ms, weights "
            << Ms(t_weights - t_config).count() << " ms, KV pool " << Ms(t_pool - t_weights).count()
            << " ms, warm-up " << Ms(Clock::now() - t_pool).count() << " ms";
  if (w->model_->device().is_cpu()) {
    // Which kernels run (kernels/cpu/isa.h; SHARDLM_CPU_ISA caps them below the CPU's best).
    LOG(INFO) << "rank " << w->comm_->rank_info().rank << ": CPU kernels "
              << kernels::IsaName(kernels::ActiveIsa())
              << " (this CPU: " << kernels::IsaName(kernels::DetectedIsa()) << ")";
  }
  return w;
}

absl::Status RankWorker::Warmup() {
  const int64_t want = options_.warmup_tokens, bs = pool_.shape().block_size;
  const int64_t blocks = pool_.shape().num_blocks;
  if (want <= 0 || blocks <= 0) return absl::OkStatus();
  // Each sequence holds `len` prompt tokens and then decodes one more.
  int64_t seqs = std::min<int64_t>(8, want);
  int64_t len = want / seqs;
  const auto blocks_each = [&] { return (len + 1 + bs - 1) / bs; };
  while (seqs > 1 && seqs * blocks_each() > blocks) --seqs;
  if (seqs * blocks_each() > blocks) len = blocks * bs - 1;
  // The decode step's position, len, stays inside the model's context.
  const int64_t max_pos = model_->config().max_position_embeddings;
  if (max_pos > 0) len = std::min(len, max_pos - 1);
  if (len <= 0) return absl::OkStatus();
  const int64_t per_seq = blocks_each();
  const int64_t vocab = model_->config().vocab_size;
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  const std::vector<int32_t> none;
  StepInput prompt, decode;
  for (int64_t s = 0; s < seqs; ++s) {
    std::vector<int32_t> table(per_seq);
    for (int64_t b = 0; b < per_seq; ++b) table[b] = static_cast<int32_t>(s * per_seq + b);
    prompt.block_tables.push_back(table);
    decode.block_tables.push_back(table);
    for (int64_t i = 0; i < len; ++i) {
      prompt.token_ids.push_back(static_cast<int32_t>((s * len + i) % vocab));
      prompt.positions.push_back(static_cast<int32_t>(i));
      prompt.seq_of_token.push_back(static_cast<int32_t>(s));
    }
    SampleRow row;
    row.row = static_cast<int32_t>(prompt.token_ids.size() - 1);
    row.seq = static_cast<int32_t>(s);
    row.sample = true;
    row.params = &greedy;
    row.prompt = &none;
    row.generated = &none;
    prompt.rows.push_back(row);
    decode.token_ids.push_back(static_cast<int32_t>(s % vocab));
    decode.positions.push_back(static_cast<int32_t>(len));
    decode.seq_of_token.push_back(static_cast<int32_t>(s));
    row.row = static_cast<int32_t>(s);
    decode.rows.push_back(row);
  }
  // Eager (a CUDA graph is captured on its bucket's first real step), and
  // on a stand-in communicator: the other ranks may still be loading, and a
  // restarted rank warms up while the others only regroup.
  std::unique_ptr<StepGraphs> graphs = std::move(graphs_);
  std::unique_ptr<Communicator> comm = std::move(comm_);
  comm_ = MakeStandInCommunicator(comm->rank_info());
  model_->SwapCommunicator(comm_.get());
  const auto start = std::chrono::steady_clock::now();
  absl::Status st = Run(prompt).status();
  const auto middle = std::chrono::steady_clock::now();
  if (st.ok()) st = Run(decode).status();
  const auto end = std::chrono::steady_clock::now();
  model_->SwapCommunicator(comm.get());
  comm_ = std::move(comm);
  graphs_ = std::move(graphs);
  if (!st.ok()) return absl::Status(st.code(), absl::StrCat("warm-up step at load: ", st.message()));
  SHARDLM_RETURN_IF_ERROR(CatchTorchErrors("clearing the warm-up's KV blocks", [&] {
    // It used blocks [0, seqs * per_seq).
    pool_.k().narrow(1, 0, seqs * per_seq).zero_();
    pool_.v().narrow(1, 0, seqs * per_seq).zero_();
    return absl::OkStatus();
  }));
  using Ms = std::chrono::duration<double, std::milli>;
  LOG(INFO) << "warm-up: " << seqs * len << " prompt tokens in " << Ms(middle - start).count()
            << " ms, a decode step of " << seqs << " in " << Ms(end - middle).count() << " ms";
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SampleRow>> RankWorker::RowsToSample(const StepInput& step) {
  std::vector<SampleRow> rows = step.rows;
  if (!MasksFollow(step)) return rows;
  if (!step.await_masks) return absl::FailedPreconditionError("the step's constraint masks have no way in");
  // On a GPU the forward pass is still running: the wait overlaps it.
  SHARDLM_RETURN_IF_ERROR(step.await_masks(rows));
  return rows;
}

absl::StatusOr<std::vector<RowResult>> RankWorker::SampleOnDevice(const at::Tensor& logits,
                                                                  const StepInput& step) {
  std::vector<RowResult> results;
  std::vector<SampleRow> rows;
  if (comm_->rank_info().rank == 0) {
    SHARDLM_ASSIGN_OR_RETURN(rows, RowsToSample(step));
  }
  SHARDLM_RETURN_IF_ERROR(CatchTorchErrors("sampling", [&] {
    if (comm_->rank_info().rank == 0) {
      kernels::StepPartTimer timer(kernels::StepPart::kSampling);
      results = ProcessRowsOnDevice(logits, rows);  // the rows are sampled where the logits are
    }
    // Every rank has waited for its stream before AsyncError looks: rank 0
    // by copying its results back, the others (and a step with no rows) on
    // a tiny kernel queued behind the step.
    if (results.empty()) at::zeros({1}, at::TensorOptions().device(model_->device())).item<float>();
    return absl::OkStatus();
  }));
  return results;
}

absl::Status RankWorker::MakeGraphs() {
  graphs_.reset();
  if (pool_.scratch_block() < 0) return absl::OkStatus();
  StepGraphs::Options go;
  go.max_batch = options_.cuda_graph_max_batch;
  go.capture = options_.cuda_graph_capture;
  go.comm = comm_.get();
  absl::StatusOr<std::unique_ptr<StepGraphs>> made = StepGraphs::Create(*model_, pool_, go);
  if (made.status().code() == absl::StatusCode::kFailedPrecondition) {
    // The same on every rank (the model and the build), so every rank runs
    // the same steps eagerly and their collectives still match.
    LOG(WARNING) << "rank " << comm_->rank_info().rank << ": " << made.status().message()
                 << "; every step runs eagerly";
    return absl::OkStatus();
  }
  SHARDLM_RETURN_IF_ERROR(made.status());
  graphs_ = std::move(*made);
  return absl::OkStatus();
}

std::vector<int64_t> RankWorker::graph_buckets() const {
  return graphs_ != nullptr ? graphs_->bucket_sizes() : std::vector<int64_t>();
}

absl::Status RankWorker::Regroup() {
  c10::OptionalDeviceGuard guard;
  if (!model_->device().is_cpu()) guard.reset_device(model_->device());
  SHARDLM_RETURN_IF_ERROR(CatchTorchErrors("clearing the KV cache", [&] {
    pool_.k().zero_();
    pool_.v().zero_();
    return absl::OkStatus();
  }));
  last_sampled_.clear();
  return MakeGraphs();  // drops the old communicator's graphs, if DropGraphs did not
}

absl::StatusOr<StepInput> RankWorker::WithFeedback(const StepInput& step,
                                                   std::vector<std::vector<int32_t>>& histories) {
  const int64_t n = static_cast<int64_t>(step.feedback.size());
  // Rank 0 names the tokens; -1 for a row that sampled nothing, so that
  // every rank fails the step alike after the broadcast.
  at::Tensor tokens = at::empty({n}, at::kFloat);
  float* t = tokens.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t prev = step.feedback[i].second;
    t[i] =
        prev < static_cast<int32_t>(last_sampled_.size()) ? static_cast<float>(last_sampled_[prev]) : -1.0f;
  }
  if (comm_->rank_info().world_size > 1) {
    at::Tensor shared = tokens.to(model_->device());
    SHARDLM_RETURN_IF_ERROR(comm_->Broadcast(shared, /*root=*/0));
    tokens = shared.cpu();
    t = tokens.data_ptr<float>();
  }
  StepInput out = step;
  out.feedback.clear();
  std::vector<int32_t> fed(step.block_tables.size(), -1);  // per sequence: its fed-back token
  for (int64_t i = 0; i < n; ++i) {
    const auto [index, prev] = step.feedback[i];
    if (t[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("step feedback: row ", prev, " of the previous step sampled no token"));
    }
    out.token_ids[index] = static_cast<int32_t>(t[i]);
    fed[step.seq_of_token[index]] = out.token_ids[index];
  }
  // Its rows share one history (the codec decodes one per sequence): extend it once.
  histories.assign(step.block_tables.size(), {});
  for (SampleRow& row : out.rows) {
    if (fed[row.seq] < 0 || row.generated == nullptr) continue;
    if (histories[row.seq].empty()) {
      histories[row.seq] = *row.generated;
      histories[row.seq].push_back(fed[row.seq]);
    }
    row.generated = &histories[row.seq];
  }
  return out;
}

absl::StatusOr<std::vector<RowResult>> RankWorker::Execute(const StepInput& step) {
  c10::OptionalDeviceGuard guard;
  if (!model_->device().is_cpu()) guard.reset_device(model_->device());
  absl::StatusOr<std::vector<RowResult>> rows;
  if (step.feedback.empty()) {
    rows = Run(step);
  } else {
    std::vector<std::vector<int32_t>> histories;
    absl::StatusOr<StepInput> filled = WithFeedback(step, histories);
    rows = filled.ok() ? Run(*filled) : absl::StatusOr<std::vector<RowResult>>(filled.status());
  }
  last_sampled_.assign(step.rows.size(), -1);
  if (rows.ok() && rows->size() == step.rows.size()) {
    for (size_t i = 0; i < step.rows.size(); ++i) {
      if (step.rows[i].sample) last_sampled_[i] = (*rows)[i].token;
    }
  }
  return rows;
}

absl::StatusOr<std::vector<RowResult>> RankWorker::Run(const StepInput& step) {
  c10::OptionalDeviceGuard guard;
  if (!model_->device().is_cpu()) guard.reset_device(model_->device());
  for (const auto& [src, dst] : step.block_copies) {
    // K, V: [layers, blocks, ...]; copy one block across all layers.
    pool_.k().select(1, dst).copy_(pool_.k().select(1, src));
    pool_.v().select(1, dst).copy_(pool_.v().select(1, src));
  }
  // A broken communicator (NCCL) is not replayed again: its abort waits for
  // the graphs that captured it to go (collectives/nccl_communicator.cc).
  if (graphs_ != nullptr && !comm_->AsyncError().ok()) graphs_.reset();
  at::Tensor logits;
  if (graphs_ != nullptr && graphs_->Takes(step)) {
    SHARDLM_ASSIGN_OR_RETURN(logits, graphs_->Run(step));
    // The replay's collectives were captured without events: time them now.
    comm_->WatchEnqueued("a CUDA graph's collectives");
  } else {
    SHARDLM_ASSIGN_OR_RETURN(logits, model_->Forward(step, pool_));
  }
  if (!model_->device().is_cpu()) {
    // The step's collectives were enqueued without waiting: the results are
    // only good if none of them failed (collectives/communicator.h).
    absl::StatusOr<std::vector<RowResult>> results = SampleOnDevice(logits, step);
    if (absl::Status failed = comm_->AsyncError(); !failed.ok()) {
      graphs_.reset();  // so that the communicator's abort can finish
      return failed;
    }
    return results;
  }
  if (comm_->rank_info().rank != 0) return std::vector<RowResult>();  // rank 0 samples
  SHARDLM_ASSIGN_OR_RETURN(const std::vector<SampleRow> rows, RowsToSample(step));
  kernels::StepPartTimer timer(kernels::StepPart::kSampling);
  std::vector<RowResult> results(rows.size());
  const int64_t vocab = logits.size(1);
  const float* data = logits.data_ptr<float>();
  // Rows are independent: sample them in parallel.
  kernels::ParallelFor(0, static_cast<int64_t>(rows.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) results[i] = ProcessRow(data + i * vocab, vocab, rows[i]);
  });
  return results;
}

}  // namespace shardlm
