#include "coordinator/scheduler.h"

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

std::vector<Scheduler::Work> Scheduler::Schedule(KvSpace& kv) {
  std::vector<Work> work;
  int64_t budget = options_.max_batch_tokens;
  if (step_limit_ > 0) {
    int64_t decodes = 0;
    for (const SchedSeq* s : running_) decodes += s->num_computed + 1 == s->length() ? 1 : 0;
    budget = std::min(budget, std::max(step_limit_, decodes));
  }
  const int64_t preemptions_before = preemptions_;
  const bool was_empty = running_.empty();
  double seconds_left = time_budget_ ? time_budget_->seconds : 0;
  bool first_chunk = true;
  auto prompt_chunk = [](const SchedSeq& s) { return s.length() - s.num_computed > 1; };
  auto take_of = [&](const SchedSeq& s) {
    const int64_t need = s.length() - s.num_computed;
    int64_t take = std::min({need, budget, static_cast<int64_t>(s.max_chunk)});
    if (time_budget_ && prompt_chunk(s)) {  // cut to the time left
      int64_t fits = time_budget_->cost.ChunkTokensWithin(s.num_computed, seconds_left);
      if (first_chunk) fits = std::max<int64_t>(fits, kMinChunkTokens);
      take = std::min(take, fits);
    }
    return static_cast<int32_t>(take);
  };
  // A scheduled take spends its share of the time budget.
  auto spend = [&](const SchedSeq& s, int32_t take) {
    if (!time_budget_) return;
    seconds_left -= time_budget_->cost.ChunkSeconds(s.num_computed, take);
    if (prompt_chunk(s)) first_chunk = false;
  };

  // 1. The running set: decodes first (each needs one token to go on), then
  //    prompt chunks, each oldest first, so a long prompt never starves decodes.
  std::vector<SchedSeq*> order = running_;
  std::stable_partition(order.begin(), order.end(),
                        [](const SchedSeq* s) { return s->num_computed + 1 == s->length(); });
  for (SchedSeq* seq : order) {
    if (budget <= 0) break;
    // Preempted above, or still on the workers (unless it may go on behind its step).
    if (!seq->running || (seq->flight.steps > 0 && !seq->flight.lookahead)) continue;
    kv.Admit(*seq);  // a static batch's members join before their first chunk
    const int32_t take = take_of(*seq);
    if (take <= 0) continue;
    // Sits this step out (keeping its blocks) if even preempting every newer
    // sequence does not make room; an older one takes them when it needs to.
    if (!MakeRoom(kv, *seq, seq->num_computed + take)) continue;
    spend(*seq, take);
    kv.Grow(*seq, seq->num_computed + take);
    seq->scheduled = true;
    work.push_back({seq, take});
    budget -= take;
  }

  // 2. Admission from the head of the queue, first come first served.
  //    Continuous: every step, unless this one had to preempt (memory is
  //    short). Static: only into an empty running set, a whole batch at once.
  const bool admit = options_.policy == Policy::kContinuous ? preemptions_ == preemptions_before : was_empty;
  while (admit && !waiting_.empty() && static_cast<int32_t>(running_.size()) < options_.max_num_seqs) {
    SchedSeq* seq = waiting_.front();
    const bool has_budget = budget > 0;
    if (!has_budget && options_.policy == Policy::kContinuous) break;
    if (has_budget) {
      kv.Admit(*seq);
      const int32_t take = take_of(*seq);
      if (take <= 0 && options_.policy == Policy::kStatic) {
        // The step's time is spent: joins the batch without work, below.
        kv.Evict(*seq);
      } else if (take <= 0 || !MakeRoom(kv, *seq, seq->num_computed + take)) {
        // A preempted sequence back at the head may preempt newer ones.
        kv.Evict(*seq);  // give back what the prefix cache lent; the head waits
        break;
      } else {
        spend(*seq, take);
        kv.Grow(*seq, seq->num_computed + take);
        seq->scheduled = true;
        work.push_back({seq, take});
        budget -= take;
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
  for (const Work& w : work) w.seq->scheduled = false;
  return work;
}

}  // namespace shardlm
