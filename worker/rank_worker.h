// One tensor-parallel rank: its shard of the weights, its KV pool shard and
// its communicator. Executes Steps; rank 0 turns logits into RowResults.
//
// The same class serves the single-process engine (world size 1, in-process)
// and, with tensor parallelism, each `shardlm worker` process.
//
//   RankWorkerOptions o{.model_dir = dir, .dtype = DtypeChoice::kF32, .kv_cache_bytes = 256 << 20};
//   SHARDLM_ASSIGN_OR_RETURN(auto worker, RankWorker::Load(o, MakeSingleRankCommunicator()));
//   SHARDLM_ASSIGN_OR_RETURN(std::vector<RowResult> rows, worker->Execute(step));
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "formats/checkpoint.h"
#include "kv/kv_pool.h"
#include "model/llama_model.h"
#include "model/step_graphs.h"
#include "step/step.h"

namespace shardlm {

// A dtype a rank is told (--dtype, --kv-dtype); kAuto is resolved at load.
enum class DtypeChoice { kAuto, kF32, kBf16 };
// "auto", "f32" or "bf16"; InvalidArgument naming `flag` otherwise.
absl::StatusOr<DtypeChoice> ParseDtypeChoice(const std::string& value, const std::string& flag);
const char* DtypeChoiceName(DtypeChoice choice);

// Typed: the flags (cli/) and the worker protocol's settings (worker_server.cc)
// are parsed into these once, where they arrive (SetRankStorage, ResolveDevice).
struct RankWorkerOptions;
// --dtype, --weights and --kv-dtype (or the settings a coordinator sends) into `o`;
// errors name the flag.
absl::Status SetRankStorage(const std::string& dtype, const std::string& weights, const std::string& kv_dtype,
                            RankWorkerOptions* o);

struct RankWorkerOptions {
  std::string model_dir;
  DtypeChoice dtype = DtypeChoice::kAuto;      // kAuto: the checkpoint's (f32 stays f32, the rest bf16)
  WeightFormat weights = WeightFormat::kAuto;  // the projections' weights (--weights)
  // The KV cache's dtype (--kv-dtype): kAuto is the compute dtype. Another
  // than the compute dtype runs attention in it (the CPU only).
  DtypeChoice kv_dtype = DtypeChoice::kAuto;
  int64_t kv_cache_bytes = 256ll << 20;
  int64_t block_size = 16;
  at::Device device = at::kCPU;  // resolved from --device by ResolveDevice (model/device.h)
  // Steps of at most this many tokens run on CUDA graphs, one per batch-size
  // bucket, each captured on its first step (model/step_graphs.h); 0: none.
  // Only on a CUDA device, unless cuda_graph_capture is false.
  int64_t cuda_graph_max_batch = 0;
  // false: the graphs' padded buffers run eagerly, on any device (tests).
  bool cuda_graph_capture = true;
  // Load ends with a warm-up: a prompt step of this many tokens (over up to
  // 8 sequences, fewer where the pool is smaller) and a decode step of those
  // sequences, through the whole step path but on a stand-in communicator
  // (no peer is waited for); the blocks it wrote are zeroed after. The first
  // request then does not pay for faulting in the activations' memory,
  // starting the thread team, or the device's library handles
  // (docs/cpu_kernels.md, "Warm-up at load"). 0: none.
  int64_t warmup_tokens = 256;
};

class RankWorker final : public StepExecutor {
 public:
  static absl::StatusOr<std::unique_ptr<RankWorker>> Load(const RankWorkerOptions& options,
                                                          std::unique_ptr<Communicator> comm);

  // Runs one step; on rank 0 returns one RowResult per step.rows entry,
  // elsewhere nothing (rank 0 samples). step.feedback refers to the rows of
  // the step this rank ran last.
  absl::StatusOr<std::vector<RowResult>> Execute(const StepInput& step) override;

  // A new group formed around this rank (its communicator was replaced):
  // zeroes the KV pool and drops the CUDA graphs, which hold the old
  // communicator's collectives (each bucket is captured again on its next step).
  absl::Status Regroup();
  // Drops the CUDA graphs, which hold the communicator's captured
  // collectives: before the communicator is replaced (NCCL's destroy and
  // abort wait for every graph that captured it).
  void DropGraphs() { graphs_.reset(); }
  // The step sizes CUDA graphs serve (empty: every step runs eagerly).
  std::vector<int64_t> graph_buckets() const;
  // A step was refused without running: feedback from it finds no tokens.
  void ForgetSampled() { last_sampled_.clear(); }

  const ModelConfig& config() const { return model_->config(); }
  int64_t num_blocks() const { return pool_.shape().num_blocks; }
  int64_t block_size() const { return pool_.shape().block_size; }
  // Bytes of K and V one token holds in this rank's cache, all layers.
  int64_t kv_bytes_per_token() const {
    const KvPoolShape& s = pool_.shape();
    return 2 * s.num_layers * s.num_kv_heads_per_rank * s.head_dim * pool_.k().element_size();
  }
  const LlamaModel& model() const { return *model_; }
  at::Device device() const { return model_->device(); }
  Communicator& communicator() { return *comm_; }
  KvPool& pool() { return pool_; }  // for tests

 private:
  // A GPU step's ending: rank 0 samples where the logits are; the others wait
  // for their stream, so that AsyncError sees the whole step.
  absl::StatusOr<std::vector<RowResult>> SampleOnDevice(const at::Tensor& logits, const StepInput& step);
  // Rank 0: the step's rows, with the masks that follow the step filled in
  // (waiting for them: StepInput::await_masks).
  absl::StatusOr<std::vector<SampleRow>> RowsToSample(const StepInput& step);

  // The step with its fed-back tokens filled in (every rank gets them from
  // rank 0, which sampled them), and penalty histories extended to match;
  // `histories` holds those.
  absl::StatusOr<StepInput> WithFeedback(const StepInput& step, std::vector<std::vector<int32_t>>& histories);
  absl::StatusOr<std::vector<RowResult>> Run(const StepInput& step);
  // Sets up graphs_ (captured bucket by bucket on first use) when the
  // options ask for them and this device can.
  absl::Status MakeGraphs();
  // Load's warm-up (RankWorkerOptions::warmup_tokens): eager, on
  // MakeStandInCommunicator.
  absl::Status Warmup();

  std::unique_ptr<Communicator> comm_;
  std::vector<int32_t> last_sampled_;  // rank 0: the token each row of the last step sampled (-1: none)
  std::unique_ptr<Checkpoint> ckpt_;   // open while loading only
  std::unique_ptr<LlamaModel> model_;
  KvPool pool_;
  RankWorkerOptions options_;
  std::unique_ptr<StepGraphs> graphs_;  // null: every step eager
};

}  // namespace shardlm
