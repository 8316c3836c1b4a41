// The coordinator's engine: request state, iteration-level (Orca) continuous
// batching over a paged KV cache, and stopping.
//
// Every Step() builds one batch: one token for each decoding sequence plus
// chunks of waiting prompts, under a token budget and the free-block count.
// Finished sequences leave at once and free their blocks; new requests join
// at the next step. When blocks run out, the newest sequence is preempted
// (its blocks freed, recomputed later) rather than failing.
//
//   Engine engine(worker.get(), worker->config(), worker->num_blocks(), worker->block_size(), {});
//   SHARDLM_ASSIGN_OR_RETURN(int64_t id, engine.Submit(std::move(request)));
//   while (!engine.Idle()) SHARDLM_RETURN_IF_ERROR(engine.Step());
//   GenerateResult r = *engine.TakeResult(id);
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kv/block_allocator.h"
#include "model/model_config.h"
#include "model/step.h"

namespace shardlm {

enum class FinishReason { kNone, kLength, kStop };
const char* FinishReasonName(FinishReason r);

struct TopLogprob {
  int32_t id;
  float logprob;
};

struct GenerateRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  bool has_seed = false;  // otherwise a random seed is drawn
  int32_t max_new_tokens = 16;
  std::vector<int32_t> stop_token_ids;  // besides the model's EOS ids
  bool ignore_eos = false;
  bool score_prompt = false;  // fill GenerateResult::prompt_scores
  // Called for each generated token as soon as it is sampled, with its
  // top-n alternatives when asked for.
  std::function<void(int32_t token, float logprob, const std::vector<TopLogprob>& top)> on_token;
};

struct GenerateResult {
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<TopLogprob>> top_logprobs;  // per generated token
  std::vector<std::optional<float>> prompt_scores;    // [0] is always empty
  FinishReason finish_reason = FinishReason::kNone;
  absl::Status status;
};

class Engine {
 public:
  struct Options {
    int64_t max_batch_tokens = 2048;  // tokens per step (prompt chunks + decodes)
  };

  Engine(StepExecutor* executor, const ModelConfig& cfg, int32_t num_blocks, int32_t block_size,
         Options options);

  // Validates (InvalidArgument naming the field and the limit) and queues.
  absl::StatusOr<int64_t> Submit(GenerateRequest request);
  // One scheduler iteration. An executor failure fails the work in flight.
  absl::Status Step();
  bool Idle() const { return running_.empty(); }
  // The result of a finished request (once), or nullopt.
  std::optional<GenerateResult> TakeResult(int64_t id);
  // Every finished request's result (each once), by id.
  std::vector<std::pair<int64_t, GenerateResult>> TakeFinished();
  // Stops a queued or running request now and frees its blocks; its result
  // carries CANCELLED. False if the id is not running.
  bool Cancel(int64_t id);
  // Submit's checks alone (const: safe to call beside a running step).
  absl::Status Validate(const GenerateRequest& r) const;

  // Convenience: submit one request and step until it finishes.
  absl::StatusOr<GenerateResult> Run(GenerateRequest request);

  int32_t num_free_blocks() const { return allocator_.num_free(); }
  int32_t num_blocks() const { return allocator_.num_blocks(); }
  const ModelConfig& config() const { return cfg_; }
  int64_t steps() const { return steps_; }
  int64_t preemptions() const { return preemptions_; }

 private:
  struct Sequence {
    int64_t id = 0;
    GenerateRequest request;
    std::vector<int32_t> tokens;  // prompt then generated
    int32_t num_computed = 0;     // tokens whose K/V are in the cache
    std::vector<int32_t> blocks;
    GenerateResult result;
  };

  // Grows `seq`'s block table to hold `tokens` tokens, preempting newer
  // sequences not in this step when needed. False if that cannot make room.
  bool EnsureBlocks(Sequence& seq, int64_t tokens, const std::vector<Sequence*>& in_step);
  void Preempt(Sequence& seq);
  void Finish(Sequence& seq, FinishReason reason, absl::Status status = absl::OkStatus());
  bool IsStop(const Sequence& seq, int32_t token) const;

  StepExecutor* executor_;
  ModelConfig cfg_;
  int32_t block_size_;
  Options options_;
  BlockAllocator allocator_;
  std::deque<std::unique_ptr<Sequence>> running_;  // arrival order
  std::map<int64_t, GenerateResult> done_;
  int64_t next_id_ = 1;
  int64_t steps_ = 0;
  int64_t preemptions_ = 0;
  std::mt19937_64 seed_rng_{std::random_device{}()};
};

}  // namespace shardlm
