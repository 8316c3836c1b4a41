// Engine::PlanStep and its parts: the scheduler's choice made into a
// StepInput (coordinator/engine/engine.h).
#include <algorithm>
#include <chrono>
#include <vector>

#include "common/logging.h"
#include "coordinator/engine/engine.h"
#include "coordinator/engine/service_metrics.h"
#include "step/draw_seed.h"

namespace shardlm {

std::unique_ptr<PlannedStep> Engine::PlanStep(bool ahead) {
  ExpireHandles();
  EndPastDeadline();
  const int64_t preemptions_before = scheduler_.preemptions();
  Propose();
  const std::vector<Scheduler::Work> work = scheduler_.Schedule(kv_);
  if (options_.metrics && scheduler_.preemptions() > preemptions_before) {
    options_.metrics->preemptions->Add(static_cast<double>(scheduler_.preemptions() - preemptions_before));
  }
  if (work.empty()) {
    DropUnscheduledProposals();
    // With a step in flight, the blocks it holds come back when it is applied.
    if (!seqs_.empty() && scheduler_.preemptions() == preemptions_before && steps_in_flight_ == 0) {
      FailUnschedulable();
    }
    UpdateGauges();
    return nullptr;
  }
  auto plan = std::make_unique<PlannedStep>();
  for (const Scheduler::Work& w : work) PlanSequence(*plan, static_cast<Sequence&>(*w.seq), w.tokens, ahead);
  DropUnscheduledProposals();
  ++steps_;
  ++steps_in_flight_;
  UpdateGauges();
  return plan;
}

void Engine::EndPastDeadline() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<int64_t> past;
  for (const auto& [id, seq] : seqs_) {
    const auto deadline = seq->request.deadline;
    if (!seq->end_requested && deadline != std::chrono::steady_clock::time_point{} && deadline <= now) {
      past.push_back(id);
    }
  }
  for (int64_t id : past) {
    EndNow(
        id, FinishReason::kNone,
        absl::DeadlineExceededError("the call's deadline passed; its work was stopped and its blocks freed"));
  }
}

void Engine::FailUnschedulable() {
  // Nothing could be scheduled, nothing was preempted to try again: the
  // oldest request does not fit even alone (handles hold the rest).
  Sequence& seq = *seqs_.begin()->second;
  End(seq, FinishReason::kNone, kv_.TooSmall(static_cast<int64_t>(seq.tokens.size())));
  RetireIfEnded(seq);
}

void Engine::PlanSequence(PlannedStep& plan, Sequence& seq, int32_t take, bool ahead) {
  StepInput& step = plan.input;
  const int32_t seq_index = static_cast<int32_t>(step.block_tables.size());
  plan.in_step.push_back(&seq);
  plan.takes.push_back(take);
  const int32_t first_row = static_cast<int32_t>(step.token_ids.size());
  const int32_t known = static_cast<int32_t>(seq.tokens.size());
  // The proposals the scheduler left room for (it may cut them).
  if (static_cast<int32_t>(seq.draft.size()) > take - 1) seq.draft.resize(std::max(0, take - 1));
  const int32_t proposed = static_cast<int32_t>(seq.draft.size());
  for (int32_t i = 0; i < take; ++i) {
    const int32_t pos = seq.num_computed + i;
    if (pos < known) {
      step.token_ids.push_back(seq.tokens[pos]);
    } else if (pos - known < proposed) {
      step.token_ids.push_back(seq.draft[pos - known]);
    } else {
      // Sampled by the step in flight: the workers fill it in.
      CHECK(ahead && pos == known && seq.flight.pending == 1 && seq.flight.pending_row >= 0)
          << "planned an unknown token: position " << pos << " of " << known;
      step.feedback.emplace_back(static_cast<int32_t>(step.token_ids.size()), seq.flight.pending_row);
      step.token_ids.push_back(0);
    }
    step.positions.push_back(pos);
    step.seq_of_token.push_back(seq_index);
    // Score the next token when it is a prompt token (given everything before it).
    const int32_t scored = pos + 1 - seq.prompt_offset;
    if (seq.request.score_prompt && scored >= 0 && scored < static_cast<int32_t>(seq.request.prompt.size()) &&
        !seq.result.prompt_scores[scored]) {
      SampleRow row;
      row.row = first_row + i;
      row.seq = seq_index;
      row.target = seq.tokens[pos + 1];
      row.params = &seq.request.sampling;  // top-n alternatives at this position
      step.rows.push_back(row);
      plan.owners.push_back({&seq, scored});
    }
  }
  const bool reaches_end = seq.num_computed + take == seq.length();
  if (reaches_end && seq.request.max_new_tokens == 0 && seq.request.next_top) {
    SampleRow row;
    row.row = first_row + take - 1;
    row.seq = seq_index;
    row.params = &seq.request.sampling;
    step.rows.push_back(row);
    plan.owners.push_back({&seq, RowOwner::kNextTopRow});
  }
  const bool samples = reaches_end && seq.request.max_new_tokens > 0;
  if (samples && proposed > 0) {
    AddProposalRows(plan, seq, first_row + take - 1 - proposed, seq_index);
  } else if (samples) {
    AddSampleRow(plan, seq, first_row + take - 1, seq_index);
  }
  // The step counts as computed from now on; its sampled token is pending.
  seq.num_computed += take;
  seq.flight.ahead += take;
  ++seq.flight.steps;
  if (samples) ++seq.flight.pending;
  // Goes on in the step planned behind this one (whether this one was
  // planned ahead or not) unless it certainly ends with it.
  seq.flight.lookahead =
      overlaps() && samples && proposed == 0 && !MayPropose(seq) && !seq.end_requested &&
      static_cast<int32_t>(seq.result.tokens.size()) + seq.flight.pending < seq.request.max_new_tokens;
  step.block_tables.push_back(seq.kv.blocks);
  step.request_ids.push_back(seq.request.request_id);
  KvManager::StepHold hold = kv_.EnterStep(seq);
  step.starts.push_back(hold.starts);
  step.block_copies.insert(step.block_copies.end(), hold.copies.begin(), hold.copies.end());
  plan.copies.insert(plan.copies.end(), hold.copies.begin(), hold.copies.end());
}

void Engine::AddSampleRow(PlannedStep& plan, Sequence& seq, int32_t row_index, int32_t seq_index) {
  StepInput& step = plan.input;
  SampleRow row;
  row.row = row_index;
  row.seq = seq_index;
  row.sample = true;
  row.params = &seq.request.sampling;
  row.prompt = &seq.context;
  row.generated = &seq.result.tokens;
  row.draw_seed = DrawSeed(seq.request.sampling.seed, seq.result.tokens.size() + seq.flight.pending);
  if (seq.matcher && seq.flight.pending > 0) {
    // Its mask needs the token the step in flight samples.
    row.mask_follows = true;
    plan.masks_follow.emplace_back(static_cast<int32_t>(step.rows.size()), &seq);
  } else {
    MaskRow(seq, row);
  }
  seq.flight.pending_row = static_cast<int32_t>(step.rows.size());
  step.rows.push_back(row);
  plan.owners.push_back({&seq, -1});
}

}  // namespace shardlm
