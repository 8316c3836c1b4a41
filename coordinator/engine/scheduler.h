// Which sequences run in the next step, and with how many tokens: the waiting
// queue, admission by free KV blocks and --max-num-seqs under the step's token
// budget, preemption (never of an older sequence by a newer one), queue
// limits, and the static-batching baseline. No tensors and no model: the
// engine executes, and lends the scheduler its block accounting as a KvSpace.
// See docs/scheduler.md.
//
//   Scheduler sched(options);
//   SHARDLM_RETURN_IF_ERROR(sched.Enqueue(&seq));  // RESOURCE_EXHAUSTED past the queue limits
//   for (const Scheduler::Work& w : sched.Schedule(kv_space)) {
//     // run w.tokens tokens of w.seq, from w.seq->num_computed
//   }
//   sched.Remove(&seq);  // finished or cancelled
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/engine/step_cost.h"

namespace shardlm {

// A sequence's steps on the workers (overlapped steps: docs/scheduler.md).
struct StepsInFlight {
  int32_t steps = 0;       // steps on the workers it is in (not preemptible while any)
  bool lookahead = false;  // in flight, yet may take its next token in the step being planned
  // num_computed counts those steps' tokens already (`ahead` of them), and
  // the `pending` tokens they sample are not among the sequence's tokens
  // yet; the last one comes from row `pending_row` of the step planned last.
  int32_t ahead = 0;
  int32_t pending = 0;
  int32_t pending_row = -1;
};

// What the scheduler sees of a request.
struct SchedSeq {
  virtual ~SchedSeq() = default;
  // Tokens known: prefix, prompt and those generated so far, and proposed().
  virtual int32_t length() const = 0;
  // Tokens proposed beyond the one a decoding sequence needs (speculative
  // decoding): its step verifies them; they are never worth a preemption.
  virtual int32_t proposed() const { return 0; }

  int64_t id = 0;            // increases with arrival: a smaller id arrived first
  int32_t num_computed = 0;  // leading tokens whose K/V are in the cache
  int32_t max_chunk = std::numeric_limits<int32_t>::max();  // tokens per step at most
  StepsInFlight flight;
  // Set by the scheduler.
  bool running = false;       // admitted (else queued)
  bool scheduled = false;     // in the step being planned
  int64_t queued_tokens = 0;  // counted against --max-queued-tokens while queued
};

// The engine's KV cache as the scheduler sees it.
class KvSpace {
 public:
  virtual ~KvSpace() = default;
  // Called when `seq` is about to be admitted: take what the cache already
  // holds for its leading tokens (prefix cache); may raise num_computed.
  virtual void Admit(SchedSeq& seq) = 0;
  // Blocks `seq` must add to hold `tokens` tokens (0 if it holds enough).
  virtual int32_t BlocksShort(const SchedSeq& seq, int32_t tokens) const = 0;
  virtual int32_t FreeBlocks() const = 0;
  // Gives `seq` the blocks for `tokens` tokens; BlocksShort <= FreeBlocks.
  virtual void Grow(SchedSeq& seq, int32_t tokens) = 0;
  // Drops every block `seq` holds and sets num_computed to 0 (preemption,
  // or an admission that did not fit). Its full blocks stay in the prefix cache.
  virtual void Evict(SchedSeq& seq) = 0;
};

class Scheduler {
 public:
  enum class Policy { kContinuous, kStatic };
  struct Options {
    Policy policy = Policy::kContinuous;
    int32_t max_num_seqs = 256;
    int64_t max_batch_tokens = 2048;
    int32_t max_queued_requests = 1024;
    int64_t max_queued_tokens = 1 << 20;
  };
  struct Work {
    SchedSeq* seq;
    int32_t tokens;  // from seq->num_computed
  };

  explicit Scheduler(Options options) : options_(options) {}

  // Caps the tokens of the next steps below max_batch_tokens (the engine's
  // first steps, before it has timed any); every running decode still gets
  // its token. <= 0: no cap.
  void LimitStepTokens(int64_t limit) { step_limit_ = limit; }

  // The engine's time budget (a step should take about --target-step-ms):
  // prompt chunks are cut so that the step's tokens cost at most `seconds`
  // under `cost`. Every running decode still gets its token, and the step's
  // first prompt chunk at least kMinChunkTokens (or the rest of its prompt),
  // so prompts always advance. Replaces a LimitStepTokens cap.
  struct TimeBudget {
    double seconds = 0;
    StepCost cost;
  };
  static constexpr int32_t kMinChunkTokens = 16;
  void LimitStepTime(const TimeBudget& budget) {
    time_budget_ = budget;
    step_limit_ = 0;
  }

  // "continuous" or "static"; InvalidArgument otherwise.
  static absl::Status ParsePolicy(const std::string& name, Policy* policy);

  // Queues a new request at the tail. RESOURCE_EXHAUSTED naming the limit
  // when the queue already holds --max-queued-requests requests or would
  // hold more than --max-queued-tokens tokens.
  absl::Status Enqueue(SchedSeq* seq);
  // Takes `seq` out of the queue or the running set (finished, cancelled).
  void Remove(SchedSeq* seq);
  // The next step: running sequences first (decodes, then prompt chunks,
  // each oldest first), then admissions from the head of the queue.
  // Preempted sequences go back to the queue in arrival order. Every
  // returned work item has tokens >= 1 and its blocks in place.
  std::vector<Work> Schedule(KvSpace& kv);

  bool Idle() const { return waiting_.empty() && running_.empty(); }
  const std::deque<SchedSeq*>& waiting() const { return waiting_; }
  const std::vector<SchedSeq*>& running() const { return running_; }  // arrival order
  int64_t queued_tokens() const { return queued_tokens_; }
  int64_t preemptions() const { return preemptions_; }
  const Options& options() const { return options_; }

 private:
  // Back to the queue, ahead of everything that arrived after it.
  void Requeue(SchedSeq* seq);
  // Makes room for `seq` to hold `tokens` by preempting newer running
  // sequences not in this step, newest first; false if even all of them
  // do not make enough.
  bool MakeRoom(KvSpace& kv, SchedSeq& seq, int32_t tokens);
  // Schedule's parts (scheduler.cc): one call's budget, the tokens a
  // sequence may take, a take recorded, the running set, then the queue.
  struct StepBudget;
  StepBudget BudgetForStep() const;
  int32_t TakeOf(const SchedSeq& seq, const StepBudget& b) const;
  void Take(KvSpace& kv, SchedSeq& seq, int32_t take, StepBudget& b);
  void ScheduleRunning(KvSpace& kv, StepBudget& b);
  void AdmitWaiting(KvSpace& kv, StepBudget& b, bool admit);

  Options options_;
  std::deque<SchedSeq*> waiting_;   // ascending id
  std::vector<SchedSeq*> running_;  // ascending id
  int64_t queued_tokens_ = 0;
  int64_t step_limit_ = 0;
  std::optional<TimeBudget> time_budget_;
  int64_t preemptions_ = 0;
};

}  // namespace shardlm
