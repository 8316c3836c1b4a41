#include "coordinator/engine/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace shardlm {
namespace {

bool ById(const SchedSeq* a, const SchedSeq* b) { return a->id < b->id; }

}  // namespace

absl::Status Scheduler::ParsePolicy(const std::string& name, Policy* policy) {
  if (name == "continuous") {
    *policy = Policy::kContinuous;
  } else if (name == "static") {
    *policy = Policy::kStatic;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("policy must be 'continuous' or 'static', got '", name, "'"));
  }
  return absl::OkStatus();
}

absl::Status Scheduler::Enqueue(SchedSeq* seq) {
  if (static_cast<int64_t>(waiting_.size()) >= options_.max_queued_requests) {
    return absl::ResourceExhaustedError(absl::StrCat("the queue is full: ", waiting_.size(),
                                                     " requests wait, the limit (--max-queued-requests) is ",
                                                     options_.max_queued_requests, "; retry later"));
  }
  const int64_t tokens = std::max(0, seq->length() - seq->num_computed);
  if (queued_tokens_ + tokens > options_.max_queued_tokens) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the queue is full: its requests hold ", queued_tokens_, " tokens to compute and this one ", tokens,
        ", over the limit (--max-queued-tokens) of ", options_.max_queued_tokens, "; retry later"));
  }
  seq->running = false;
  seq->queued_tokens = tokens;
  queued_tokens_ += tokens;
  // Ids grow with arrival, but a preempted sequence may already be queued:
  // keep the queue in arrival order.
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), seq, ById), seq);
  return absl::OkStatus();
}

void Scheduler::Requeue(SchedSeq* seq) {
  seq->running = false;
  seq->queued_tokens = std::max(0, seq->length() - seq->num_computed);
  queued_tokens_ += seq->queued_tokens;
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), seq, ById), seq);
}

void Scheduler::Remove(SchedSeq* seq) {
  if (seq->running) {
    auto it = std::find(running_.begin(), running_.end(), seq);
    if (it != running_.end()) running_.erase(it);
    seq->running = false;
    return;
  }
  auto it = std::find(waiting_.begin(), waiting_.end(), seq);
  if (it == waiting_.end()) return;
  queued_tokens_ -= seq->queued_tokens;
  seq->queued_tokens = 0;
  waiting_.erase(it);
}

bool Scheduler::MakeRoom(KvSpace& kv, SchedSeq& seq, int32_t tokens) {
  while (kv.BlocksShort(seq, tokens) > kv.FreeBlocks()) {
    // The newest running sequence that arrived after `seq` and is not
    // already in this step (or on the workers).
    SchedSeq* victim = nullptr;
    for (auto it = running_.rbegin(); it != running_.rend() && (*it)->id > seq.id; ++it) {
      if (!(*it)->scheduled && (*it)->flight.steps == 0) {
        victim = *it;
        break;
      }
    }
    if (victim == nullptr) return false;
    kv.Evict(*victim);
    running_.erase(std::find(running_.begin(), running_.end(), victim));
    Requeue(victim);
    ++preemptions_;
  }
  return true;
}

// One Schedule call's budget: the tokens and the time left in the step, and
// the work chosen so far.
struct Scheduler::StepBudget {
  int64_t tokens = 0;
  double seconds_left = 0;
  bool first_chunk = true;  // no prompt chunk taken yet (it gets at least kMinChunkTokens)
  std::vector<Work> work;
};

namespace {

// A sequence that needs one token to go on (besides any it proposes).
bool IsDecode(const SchedSeq& s) { return s.num_computed + 1 + s.proposed() == s.length(); }
bool IsPromptChunk(const SchedSeq& s) { return !IsDecode(s) && s.length() - s.num_computed > 1; }

}  // namespace

Scheduler::StepBudget Scheduler::BudgetForStep() const {
  StepBudget b;
  b.tokens = options_.max_batch_tokens;
  if (step_limit_ > 0) {
    int64_t decodes = 0;
    for (const SchedSeq* s : running_) decodes += IsDecode(*s) ? 1 : 0;
    b.tokens = std::min(b.tokens, std::max(step_limit_, decodes));
  }
  b.seconds_left = time_budget_ ? time_budget_->seconds : 0;
  return b;
}

int32_t Scheduler::TakeOf(const SchedSeq& s, const StepBudget& b) const {
  const int64_t need = s.length() - s.num_computed;
  int64_t take = std::min({need, b.tokens, static_cast<int64_t>(s.max_chunk)});
  if (time_budget_ && IsPromptChunk(s)) {  // cut to the time left
    int64_t fits = time_budget_->cost.ChunkTokensWithin(s.num_computed, b.seconds_left);
    if (b.first_chunk) fits = std::max<int64_t>(fits, kMinChunkTokens);
    take = std::min(take, fits);
  }
  return static_cast<int32_t>(take);
}

// `take` tokens of `seq` join the step, spending their share of the budget.
void Scheduler::Take(KvSpace& kv, SchedSeq& seq, int32_t take, StepBudget& b) {
  if (time_budget_) {
    b.seconds_left -= time_budget_->cost.ChunkSeconds(seq.num_computed, take);
    if (IsPromptChunk(seq)) b.first_chunk = false;
  }
  kv.Grow(seq, seq.num_computed + take);
  seq.scheduled = true;
  b.work.push_back({&seq, take});
  b.tokens -= take;
}

// The running set: decodes first (each needs one token to go on), then
// prompt chunks, each oldest first, so a long prompt never starves decodes.
void Scheduler::ScheduleRunning(KvSpace& kv, StepBudget& b) {
  std::vector<SchedSeq*> order = running_;
  const auto decodes_end =
      std::stable_partition(order.begin(), order.end(), [](const SchedSeq* s) { return IsDecode(*s); });
  int64_t decodes_left = decodes_end - order.begin();
  for (SchedSeq* seq : order) {
    if (b.tokens <= 0) break;
    if (decodes_left > 0) --decodes_left;  // the decodes after this one
    // Preempted above, or still on the workers (unless it may go on behind its step).
    if (!seq->running || (seq->flight.steps > 0 && !seq->flight.lookahead)) continue;
    kv.Admit(*seq);  // a static batch's members join before their first chunk
    int32_t take = TakeOf(*seq, b);
    if (take <= 0) continue;
    if (seq->proposed() > 0) {
      // Proposals take what the decodes after it leave of the budget, and
      // only free blocks: never a preemption.
      take = static_cast<int32_t>(std::max<int64_t>(1, std::min<int64_t>(take, b.tokens - decodes_left)));
      if (take > 1 && kv.BlocksShort(*seq, seq->num_computed + take) > kv.FreeBlocks()) take = 1;
    }
    // Sits this step out (keeping its blocks) if even preempting every newer
    // sequence does not make room; an older one takes them when it needs to.
    if (!MakeRoom(kv, *seq, seq->num_computed + take)) continue;
    Take(kv, *seq, take, b);
  }
}

// Admission from the head of the queue, first come first served, while
// `admit` (Schedule says when) and until a take has to preempt.
void Scheduler::AdmitWaiting(KvSpace& kv, StepBudget& b, bool admit) {
  const int64_t preemptions_before = preemptions_;
  while (admit && !waiting_.empty() && static_cast<int32_t>(running_.size()) < options_.max_num_seqs) {
    SchedSeq* seq = waiting_.front();
    const bool has_budget = b.tokens > 0;
    if (!has_budget && options_.policy == Policy::kContinuous) break;
    if (has_budget) {
      kv.Admit(*seq);
      const int32_t take = TakeOf(*seq, b);
      if (take <= 0 && options_.policy == Policy::kStatic) {
        // The step's time is spent: joins the batch without work, below.
        kv.Evict(*seq);
      } else if (take <= 0 || !MakeRoom(kv, *seq, seq->num_computed + take)) {
        // A preempted sequence back at the head may preempt newer ones.
        kv.Evict(*seq);  // give back what the prefix cache lent; the head waits
        break;
      } else {
        Take(kv, *seq, take, b);
      }
    }
    // Static without budget (tokens or time) left: joins the batch now, computes from the next step.
    waiting_.pop_front();
    queued_tokens_ -= seq->queued_tokens;
    seq->queued_tokens = 0;
    seq->running = true;
    running_.insert(std::upper_bound(running_.begin(), running_.end(), seq, ById), seq);
    if (preemptions_ != preemptions_before) break;  // it had to preempt: memory is short
  }
}

std::vector<Scheduler::Work> Scheduler::Schedule(KvSpace& kv) {
  StepBudget b = BudgetForStep();
  const int64_t preemptions_before = preemptions_;
  const bool was_empty = running_.empty();
  ScheduleRunning(kv, b);
  // Continuous: admit every step, unless this one had to preempt (memory is
  // short). Static: only into an empty running set, a whole batch at once.
  AdmitWaiting(kv, b,
               options_.policy == Policy::kContinuous ? preemptions_ == preemptions_before : was_empty);
  for (const Work& w : b.work) w.seq->scheduled = false;
  return std::move(b.work);
}

}  // namespace shardlm
