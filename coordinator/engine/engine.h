// The coordinator's engine: request state, iteration-level (Orca) continuous
// batching over a paged KV cache, and stopping. The cache's bookkeeping
// (blocks, prefix cache, copy-on-write, handles) is the KvManager's.
//
// A request is validated and queued; the Scheduler (coordinator/engine/scheduler.h)
// picks each step's work: one token for each decoding sequence plus chunks of
// prompts, under a token budget, --max-num-seqs and the free blocks, with
// preemption when blocks run out (docs/scheduler.md). The engine turns that
// choice into a StepInput, has the executor run it, and applies the results.
// A sequence ends one way (End, then Retire once no step writes its blocks),
// whether it finished, was stopped or cancelled, or failed.
//
// Its face is what a driver needs, as nano-vllm's step() is: requests in
// (Submit, Cancel, Stop), a step in four calls (plan, start, wait, apply),
// results out (TakeFinished), and the handles and the group's recovery. A
// step is four calls so that a driver can wait for the workers without its
// lock, and plan the next step while one runs: EngineLoop
// (coordinator/serving/engine_loop.h) drives it for the server, EngineRunner
// (engine_runner.h) from one thread for batch, the benchmarks and the tests.
//
//   Engine engine(worker.get(), worker->config(), worker->num_blocks(), worker->block_size(), {});
//   SHARDLM_ASSIGN_OR_RETURN(int64_t id, engine.Submit(std::move(request)));
//   if (auto plan = engine.PlanStep()) {
//     auto pending = engine.StartStep(*plan);           // returns at once with worker processes
//     engine.ApplyStep(*plan, engine.WaitStep(*plan, *pending));
//   }
//   for (auto& [id, result] : engine.TakeFinished()) ...
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/engine/decode_step_times.h"
#include "coordinator/engine/draft_proposer.h"
#include "coordinator/engine/engine_request.h"
#include "coordinator/engine/kv_manager.h"
#include "coordinator/engine/planned_step.h"
#include "coordinator/engine/scheduler.h"
#include "coordinator/engine/sequence.h"
#include "coordinator/engine/step_cost.h"
#include "coordinator/engine/validate_request.h"
#include "formats/model_config.h"
#include "kv/kv_events.h"
#include "step/step.h"

namespace shardlm {

class ServiceMetrics;

class Engine {
 public:
  using PlannedStep = ::shardlm::PlannedStep;
  struct Options {
    int64_t max_batch_tokens = 2048;  // tokens per step (prompt chunks + decodes)
    int32_t max_num_seqs = 256;       // sequences running at once (admitted from the queue)
    // kContinuous: admit from the queue at every step (iteration-level);
    // kStatic: admit a batch only when the running set is empty, run it to
    // completion (the baseline the benchmarks compare against).
    Scheduler::Policy policy = Scheduler::Policy::kContinuous;
    int32_t max_queued_requests = 1024;   // waiting requests; past it Submit is RESOURCE_EXHAUSTED
    int64_t max_queued_tokens = 1 << 20;  // prompt tokens of waiting requests; likewise
    double max_handle_share = 0.5;        // kept handles may pin at most this share of the blocks
    int64_t handle_ttl_ms = 600000;       // a handle not released expires after this
    bool prefix_caching = true;           // reuse full blocks of identical token prefixes
    // Plan and start the next step while one runs, when the executor
    // overlaps steps (worker processes): PlanStep(/*ahead=*/true).
    bool overlap_steps = true;
    // A step should take about this long: from the measured cost of a token
    // and of the cached keys it attends to (step_cost.h), long prompts are
    // cut into chunks that fit, so a request that is
    // cancelled or past its deadline stops within about two steps (the one
    // running and the one planned behind it), and decodes are not held up
    // behind a long prompt. 0: steps are bounded by max_batch_tokens alone.
    int64_t target_step_ms = 250;
    // Speculative decoding (docs/speculative_decoding.md): up to `tokens`
    // tokens proposed for each decoding sequence, by prompt lookup (kNgram)
    // or by `draft` (kDraft), in steps with at most `max_batch` running
    // sequences and `max_rows` rows of decodes and proposals.
    struct Speculation {
      enum class Method { kNone, kNgram, kDraft } method = Method::kNone;
      int32_t tokens = 5;
      int32_t max_batch = 2;  // the CLI's default: 2 for kNgram, 1 for kDraft
      int32_t max_rows = 8;
      DraftModelProposer* draft = nullptr;  // kDraft: the draft model; outlives the engine
      // kDraft: a draft pass's cost, and each proposal row's, in one-row
      // steps, which set how many tokens it proposes (engine_speculate.cc);
      // 0: as measured.
      double draft_cost = 0;
      double row_cost = 0;
      // kDraft: prompt lookup proposes first where the sequence's last
      // lookup_min_n or more tokens occurred before (a copied passage, an
      // edited function: its proposals cost no draft pass), the draft model
      // elsewhere. 0: the draft alone.
      int32_t lookup_min_n = 3;
    } speculation;
    ServiceMetrics* metrics = nullptr;  // counted into when set
    // Where the prefix cache's changes go, step by step (docs/kv_events.md); none when null.
    KvEventSink* kv_events = nullptr;
  };

  // A proposal length, and the tokens per unit of time it is expected to
  // make (engine_speculate.cc; a one-token probe carries plain decoding's).
  struct ProposalChoice {
    int32_t k = 0;
    double rate = 0;
  };

  struct Stats {
    int32_t num_blocks = 0;
    int32_t free_blocks = 0;        // free or evictable cache
    int32_t cached_blocks = 0;      // evictable prefix cache
    int32_t referenced_blocks = 0;  // held by sequences or handles
    int32_t running = 0;            // admitted sequences
    int32_t waiting = 0;            // queued sequences
    int32_t handles = 0;
    int64_t prefix_cache_hits = 0;  // blocks reused by lookup
    int64_t steps = 0;              // steps planned
    int64_t preemptions = 0;        // sequences preempted
    int64_t proposed_tokens = 0;    // speculative decoding: tokens proposed and verified
    int64_t accepted_tokens = 0;    // of those, accepted
    // Of those, prompt lookup's (with a draft model, lookup proposes first where it matches).
    int64_t lookup_proposed_tokens = 0;
    int64_t lookup_accepted_tokens = 0;
  };

  Engine(StepExecutor* executor, const ModelConfig& cfg, int32_t num_blocks, int32_t block_size,
         Options options);

  // Validates (InvalidArgument naming the field and the limit) and queues;
  // ResourceExhausted past the queue limits or the handle share.
  absl::StatusOr<int64_t> Submit(EngineRequest request);
  // Submit's checks alone (const: safe to call beside a running step).
  absl::Status Validate(const EngineRequest& r) const;
  // Stops a queued or running request now and frees its blocks (after the
  // step executing it, if any); its result carries CANCELLED. False if the id
  // is not queued or running.
  bool Cancel(int64_t id);
  // Ends a running request now with FinishReason::kStop, as if a stop token
  // had come (e.g. a stop string matched); a kept handle is kept. False if
  // the id is not running.
  bool Stop(int64_t id);

  // The next step's batch, or null when nothing can run now (a request the
  // cache cannot hold even alone is failed here). With `ahead`, a step may
  // be in flight: its sequences that sample a token and go on may take one
  // more token in this step, fed back from it (docs/scheduler.md).
  std::unique_ptr<PlannedStep> PlanStep(bool ahead = false);
  // Sends the plan to the executor (with the driver's lock: it encodes the
  // plan); returns at once where the executor overlaps steps.
  std::unique_ptr<PendingStep> StartStep(PlannedStep& plan);
  // Waits for its rows; needs no lock (reads only `plan`).
  absl::StatusOr<std::vector<RowResult>> WaitStep(PlannedStep& plan, PendingStep& pending);
  // Applies the results (tokens, finished requests, deferred cancellations).
  // An executor failure fails the work in flight, and is returned.
  absl::Status ApplyStep(PlannedStep& plan, absl::StatusOr<std::vector<RowResult>> results);
  // After the step before `plan` was applied: computes the constraint masks
  // that follow `plan` (PlannedStep::masks_follow) and sends them to the
  // step in flight (docs/structured_outputs.md). Nothing when it has none.
  void SendFollowingMasks(PlannedStep& plan, PendingStep& pending);
  // Whether PlanStep(true) is worth calling while a step runs.
  bool overlaps() const { return options_.overlap_steps && executor_->Overlaps(); }

  bool Idle() const { return seqs_.empty(); }
  // Every finished request's result (each once), by id.
  std::vector<std::pair<int64_t, EngineResult>> TakeFinished();

  // Releases a handle's blocks. NotFound if unknown, released, expired or
  // another owner's.
  absl::Status ReleaseHandle(const std::string& handle, const std::string& owner = "");
  // NotFound (as ReleaseHandle would say) unless `owner` holds `handle`.
  absl::Status CheckHandle(const std::string& handle, const std::string& owner) const;
  // Releases every handle past its expiry (each PlanStep does this too).
  void ExpireHandles();

  // Ends every request with `status` (the group that held their KV failed).
  void FailAll(const absl::Status& status);
  // Starts over on a new KV pool of `num_blocks` (the group was formed
  // again): every handle is dropped, and later uses of one are NotFound
  // saying `why`. Call FailAll first: nothing may be running.
  void Reset(int32_t num_blocks, const std::string& why);

  Stats stats() const;
  const ModelConfig& config() const { return cfg_; }
  const Options& options() const { return options_; }

 private:
  // Records that `seq` ends with `reason` and `status`; the first end
  // recorded wins. Its step in flight, if any, still runs: Retire follows
  // once no step writes its blocks.
  static void End(Sequence& seq, FinishReason reason, absl::Status status);
  // Finishes `seq` if it ended and no step in flight writes its blocks: its
  // result goes to done_, its blocks are freed or kept as a handle, and it
  // is forgotten (`seq` dangles after true).
  bool RetireIfEnded(Sequence& seq);
  // Stop and Cancel: ends request `id` now; false when it is not known.
  bool EndNow(int64_t id, FinishReason reason, absl::Status status);
  void RecordEnd(const Sequence& seq, const absl::Status& status) const;
  // The queued or running request `id`, or null.
  Sequence* Find(int64_t id);
  bool IsStop(const Sequence& seq, int32_t token) const;
  // PlanStep's parts: the oldest request fails when nothing fits even alone;
  // `take` tokens of `seq` join `plan`, with its scored and sampled rows.
  void FailUnschedulable();
  // Ends every request whose deadline (EngineRequest::deadline) has passed.
  void EndPastDeadline();
  void PlanSequence(PlannedStep& plan, Sequence& seq, int32_t take, bool ahead);
  void AddSampleRow(PlannedStep& plan, Sequence& seq, int32_t row_index, int32_t seq_index);
  // Speculation's parts (engine_speculate.cc): proposals for the decoding
  // sequences before the scheduler runs, dropped where it did not schedule
  // them; a speculating sequence's rows; its rows applied while they accept;
  // the step's sequences rolled back to what they kept.
  void Propose();
  // Whether speculation is on for the next step (its method, and the
  // running sequences within max_batch).
  bool SpeculationOn() const;
  // Tokens `seq` would propose now at most (the proposer's rule), by prompt
  // lookup (`lookup`) or by the draft model, and the tokens per unit of time
  // that length is expected to make.
  ProposalChoice ProposalLength(const Sequence& seq, bool lookup) const;
  // Prompt lookup's proposals for `seq` (at most k): with prompt lookup as
  // the method, after any match; with a draft model, after a match of at
  // least lookup_min_n tokens.
  std::vector<int32_t> LookUp(const Sequence& seq, int32_t k) const;
  // Whether `seq` may propose in its next step (then it is not planned
  // ahead behind this one: its proposals need the token this one draws).
  bool MayPropose(const Sequence& seq) const;
  void DropUnscheduledProposals();
  // A constrained sequence's proposals cut before the first its constraint
  // does not allow, and its rows' masks computed into seq.draft_masks.
  void ConstrainProposals(Sequence& seq, std::vector<int32_t>& draft);
  void AddProposalRows(PlannedStep& plan, Sequence& seq, int32_t first_row, int32_t seq_index);
  void ApplyRows(PlannedStep& plan, const std::vector<RowResult>& results);
  void RollBackProposals(PlannedStep& plan);
  void SettleProposals(PlannedStep& plan, bool ran);
  // Points `row` at `seq`'s mask for its next token; a matcher error ends the
  // request once this step is applied.
  void MaskRow(Sequence& seq, SampleRow& row);
  // Computes the masks of `seqs` into each one's `mask`, in parallel (one
  // llguidance matcher per sequence); false where a matcher failed.
  std::vector<bool> ComputeMasks(const std::vector<Sequence*>& seqs);
  // Advances `seq`'s matcher past `token`; ends the request where the
  // constraint is complete (kStop) or broken (an error).
  void Constrain(Sequence& seq, int32_t token);
  // Sets the metrics' gauges from the current state (when metrics are on).
  void UpdateGauges() const;
  // Hands the prefix cache's changes to Options::kv_events (when set).
  void FlushKvEvents();
  // ApplyStep's parts, in order.
  void SettleStep(PlannedStep& plan, bool ran);
  void PublishComputed(PlannedStep& plan);
  void ApplyRow(const RowOwner& owner, const RowResult& r);
  void RetireEnded(PlannedStep& plan);

  StepExecutor* executor_;
  ModelConfig cfg_;
  Options options_;
  KvManager kv_;
  Scheduler scheduler_;
  std::map<int64_t, std::unique_ptr<Sequence>> seqs_;  // queued and running, by id
  std::map<int64_t, EngineResult> done_;
  int64_t next_id_ = 1;
  int64_t steps_ = 0;
  int32_t steps_in_flight_ = 0;  // planned and not yet applied
  int64_t proposed_tokens_ = 0;  // speculation's totals (Stats)
  int64_t accepted_tokens_ = 0;
  int64_t lookup_proposed_tokens_ = 0;
  int64_t lookup_accepted_tokens_ = 0;
  DecodeStepTimes decode_times_;  // steps of decodes by rows, against the draft's passes
  // The step time budget (Options::target_step_ms): what a step costs,
  // learnt from the steps run, and when the last step's rows came back.
  void LearnStepCost(const PlannedStep& plan, bool ran);
  StepCostModel step_cost_;
  std::chrono::steady_clock::time_point last_finished_{};
  std::mt19937_64 seed_rng_{std::random_device{}()};
};

}  // namespace shardlm
