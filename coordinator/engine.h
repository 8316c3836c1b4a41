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

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kv/block_allocator.h"
#include "model/model_config.h"
#include "model/step.h"

namespace shardlm {

class ServiceMetrics;

enum class FinishReason { kNone, kLength, kStop };
const char* FinishReasonName(FinishReason r);

struct TopLogprob {
  int32_t id;
  float logprob;
};

struct GenerateRequest {
  // KV handle of an earlier result whose tokens come before `prompt` (empty:
  // none). Its blocks are shared, the partly filled last one copied.
  std::string prefix_handle;
  std::vector<int32_t> prompt;  // may be empty when a prefix handle is given
  SamplingParams sampling;
  bool has_seed = false;  // otherwise a random seed is drawn
  int32_t max_new_tokens = 16;
  std::vector<int32_t> stop_token_ids;  // besides the model's EOS ids
  bool ignore_eos = false;
  bool score_prompt = false;  // fill GenerateResult::prompt_scores (and prompt_top)
  bool next_top = false;      // fill GenerateResult::next_top after the prompt
  bool keep_handle = false;   // keep the KV as a handle (GenerateResult::handle)
  // Who asks (an API key's id; empty without keys): a handle is visible to
  // its owner only, to anyone else it is NOT_FOUND.
  std::string owner;
  // For logs: the public request id, carried into the workers' logs.
  std::string request_id;
  // When the call arrived (time to first token counts from here); unset: at Submit.
  std::chrono::steady_clock::time_point arrival{};
  // Called for each generated token as soon as it is sampled, with its
  // top-n alternatives when asked for.
  std::function<void(int32_t token, float logprob, const std::vector<TopLogprob>& top)> on_token;
};

struct GenerateResult {
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<TopLogprob>> top_logprobs;  // per generated token
  std::vector<std::optional<float>> prompt_scores;    // per prompt token; empty for the very first token
  std::vector<std::vector<TopLogprob>> prompt_top;    // per prompt token: top-n at its position
  std::vector<TopLogprob> next_top;                   // top-n of the next token after the prompt
  int32_t prefix_tokens = 0;                          // tokens that came from the prefix handle
  int32_t cached_tokens = 0;     // prompt tokens whose KV was reused (handle or prefix cache)
  std::string handle;            // when keep_handle: the KV handle of prefix + prompt + tokens
  int64_t handle_expiry_ms = 0;  // unix time in ms
  FinishReason finish_reason = FinishReason::kNone;
  absl::Status status;
};

class Engine {
 public:
  struct Options {
    int64_t max_batch_tokens = 2048;    // tokens per step (prompt chunks + decodes)
    int64_t handle_ttl_ms = 600000;     // a handle not released expires after this
    bool prefix_caching = true;         // reuse full blocks of identical token prefixes
    ServiceMetrics* metrics = nullptr;  // counted into when set
  };

  struct Stats {
    int32_t num_blocks = 0;
    int32_t free_blocks = 0;        // free or evictable cache
    int32_t cached_blocks = 0;      // evictable prefix cache
    int32_t referenced_blocks = 0;  // held by sequences or handles
    int32_t running = 0;
    int32_t handles = 0;
    int64_t prefix_cache_hits = 0;  // blocks reused by lookup
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
  // Ends a running request now with FinishReason::kStop, as if a stop token
  // had come (e.g. a stop string matched); a kept handle is kept. False if
  // the id is not running.
  bool Stop(int64_t id);
  // Submit's checks alone (const: safe to call beside a running step).
  absl::Status Validate(const GenerateRequest& r) const;

  // Convenience: submit one request and step until it finishes.
  absl::StatusOr<GenerateResult> Run(GenerateRequest request);

  // Releases a handle's blocks. NotFound if unknown, released, expired or
  // another owner's.
  absl::Status ReleaseHandle(const std::string& handle, const std::string& owner = "");
  // NotFound (as ReleaseHandle would say) unless `owner` holds `handle`.
  absl::Status CheckHandle(const std::string& handle, const std::string& owner) const;
  // Ends every request with `status` (the group that held their KV failed).
  void FailAll(const absl::Status& status);
  // Starts over on a new KV pool of `num_blocks` (the group was formed
  // again): every handle is dropped, and later uses of one are NotFound
  // saying `why`. Call FailAll first: nothing may be running.
  void Reset(int32_t num_blocks, const std::string& why);
  // Releases every handle past its expiry (each Step does this too).
  void ExpireHandles();
  Stats stats() const;
  int32_t num_free_blocks() const { return allocator_.num_free(); }
  int32_t num_blocks() const { return allocator_.num_blocks(); }
  const ModelConfig& config() const { return cfg_; }
  int64_t steps() const { return steps_; }
  int64_t preemptions() const { return preemptions_; }

 private:
  struct Sequence {
    int64_t id = 0;
    GenerateRequest request;
    std::vector<int32_t> tokens;   // prefix handle's tokens, prompt, then generated
    std::vector<int32_t> context;  // prefix + prompt: what penalties look back on
    int32_t prompt_offset = 0;     // index of the first prompt token in `tokens`
    int32_t num_computed = 0;      // tokens whose K/V are in the cache
    std::vector<int32_t> blocks;
    std::vector<uint64_t> hashes;                     // prefix hash through each published full block
    std::vector<std::pair<int32_t, int32_t>> copies;  // copy-on-write (src, dst) before the next step
    int32_t cow_src = -1;         // block to copy into the next block allocated (referenced), or -1
    bool started = false;         // has been in a step since arrival or its last preemption
    bool prompt_counted = false;  // its prompt tokens are in the metrics
    bool prefix_counted = false;  // its prefix-cache lookup is in the metrics
    std::chrono::steady_clock::time_point arrival, first_token;
    GenerateResult result;
  };
  struct Handle {
    std::string owner;
    std::vector<int32_t> tokens;
    int32_t num_computed = 0;
    std::vector<int32_t> blocks;
    int64_t expiry_ms = 0;
  };

  // Grows `seq`'s block table to hold `tokens` tokens, preempting newer
  // sequences not in this step when needed. False if that cannot make room.
  bool EnsureBlocks(Sequence& seq, int64_t tokens, const std::vector<Sequence*>& in_step);
  void Preempt(Sequence& seq);
  // Shares the handle's blocks with `seq` (copying the partly filled last one).
  absl::Status Attach(Sequence& seq, const Handle& handle);
  // Takes cached full blocks for `seq`'s leading tokens (automatic prefix caching).
  void LookupPrefix(Sequence& seq);
  // Publishes `seq`'s newly completed full blocks to the prefix cache.
  void PublishBlocks(Sequence& seq);
  static int64_t NowMs();
  void Finish(Sequence& seq, FinishReason reason, absl::Status status = absl::OkStatus());
  // Finishes running request `id` now; false if it is not running.
  bool EndRunning(int64_t id, FinishReason reason, absl::Status status);
  bool IsStop(const Sequence& seq, int32_t token) const;
  // Sets the metrics' gauges from the current state (when metrics are on).
  void UpdateGauges() const;

  StepExecutor* executor_;
  ModelConfig cfg_;
  int32_t block_size_;
  Options options_;
  BlockAllocator allocator_;
  std::deque<std::unique_ptr<Sequence>> running_;  // arrival order
  std::map<int64_t, GenerateResult> done_;
  std::map<std::string, Handle> handles_;
  // Handles dropped by Reset, with why (bounded: the oldest are forgotten).
  std::map<std::string, std::string> lost_handles_;
  std::deque<std::string> lost_order_;
  absl::Status HandleNotFound(const std::string& what, const std::string& handle) const;
  int64_t next_id_ = 1;
  int64_t steps_ = 0;
  int64_t preemptions_ = 0;
  std::mt19937_64 seed_rng_{std::random_device{}()};
};

}  // namespace shardlm
