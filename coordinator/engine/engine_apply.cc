// Engine::ApplyStep and its parts: a step's rows applied to its sequences,
// what it cost learnt, what ended retired (coordinator/engine/engine.h).
#include <algorithm>
#include <chrono>

#include "coordinator/engine/engine.h"
#include "coordinator/engine/service_metrics.h"

namespace shardlm {

void Engine::LearnStepCost(const PlannedStep& plan, bool ran) {
  // A step's own time: overlapped, it started computing when the one before
  // it came back.
  const auto began = std::max(plan.started, last_finished_);
  last_finished_ = plan.finished;
  // A failed step's time says nothing of the cost (a hang ran to the step
  // timeout; a refusal came back at once).
  const bool timed = plan.finished != std::chrono::steady_clock::time_point{};
  if (!ran || !timed) return;
  // Steps of decodes alone (every token a sampling row: decoding sequences
  // and proposals) by their rows, for the draft's proposal lengths.
  const auto sampling_rows = std::count_if(plan.input.rows.begin(), plan.input.rows.end(),
                                           [](const SampleRow& row) { return row.sample; });
  if (static_cast<size_t>(sampling_rows) == plan.input.token_ids.size()) {
    decode_times_.Observe(static_cast<int32_t>(sampling_rows),
                          std::chrono::duration<double, std::milli>(plan.finished - began).count());
  }
  if (options_.target_step_ms <= 0) return;
  // Steps of decodes alone are mostly fixed cost (a batch-1 decode reads
  // every weight for one token): they would make prompt tokens look dear.
  if (std::none_of(plan.takes.begin(), plan.takes.end(), [](int32_t take) { return take > 1; })) return;
  int64_t keys = 0;  // the cached keys its tokens attend to
  for (int32_t position : plan.input.positions) keys += position + 1;
  step_cost_.Observe(static_cast<int64_t>(plan.input.token_ids.size()), keys,
                     std::chrono::duration<double>(plan.finished - began).count());
  if (const auto& cost = step_cost_.cost()) {
    const double target = options_.target_step_ms / 1000.0;
    scheduler_.LimitStepTime({target, *cost});
  }
}

// The step's bookkeeping undone whatever its outcome (`ran`: its rows came
// back): in-flight counts, rows pending, copied blocks released.
void Engine::SettleStep(PlannedStep& plan, bool ran) {
  --steps_in_flight_;
  LearnStepCost(plan, ran);
  for (size_t k = 0; k < plan.in_step.size(); ++k) {
    Sequence* seq = plan.in_step[k];
    --seq->flight.steps;
    seq->flight.ahead -= plan.takes[k];
  }
  for (const RowOwner& o : plan.owners) {
    if (o.scored_index == -1) --o.seq->flight.pending;  // in `tokens` below, or dropped
  }
  kv_.ReleaseCopied(plan.copies);
}

// The computed blocks published to the prefix cache, prompt tokens counted.
void Engine::PublishComputed(PlannedStep& plan) {
  for (Sequence* seq : plan.in_step) {
    // One whose earlier step failed has positions nobody wrote.
    if (!seq->end_requested || seq->end_status.ok()) kv_.Publish(*seq);
    if (options_.metrics && !seq->prompt_counted &&
        seq->num_computed >= seq->prompt_offset + static_cast<int32_t>(seq->request.prompt.size())) {
      seq->prompt_counted = true;
      options_.metrics->prompt_tokens->Add(static_cast<double>(seq->request.prompt.size()));
    }
  }
}

// One row's result into its sequence: a scored prompt position, the next
// token's alternatives, or a sampled token (streamed, constrained, and
// checked for a stop or the length).
void Engine::ApplyRow(const RowOwner& owner, const RowResult& r) {
  Sequence* seq = owner.seq;
  if (seq->end_requested) return;  // cancelled or stopped while executing
  std::vector<TopLogprob> top;
  for (size_t j = 0; j < r.top_ids.size(); ++j) top.push_back({r.top_ids[j], r.top_logprobs[j]});
  if (owner.scored_index == RowOwner::kNextTopRow) {
    seq->result.next_top = std::move(top);
    return;
  }
  if (owner.scored_index >= 0) {
    seq->result.prompt_scores[owner.scored_index] = r.target_logprob;
    seq->result.prompt_top[owner.scored_index] = std::move(top);
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (seq->result.tokens.empty()) {
    seq->first_token = now;
    const std::chrono::duration<double> ttft = seq->first_token - seq->arrival;
    if (options_.metrics) options_.metrics->time_to_first_token->Observe(ttft.count());
  } else if (options_.metrics) {
    const std::chrono::duration<double> itl = now - seq->last_token;
    options_.metrics->inter_token_latency->Observe(itl.count());
  }
  seq->last_token = now;
  if (options_.metrics) options_.metrics->generation_tokens->Add();
  seq->tokens.push_back(r.token);
  seq->result.tokens.push_back(r.token);
  seq->result.logprobs.push_back(r.logprob);
  if (seq->request.on_token) seq->request.on_token(r.token, r.logprob, top);
  seq->result.top_logprobs.push_back(std::move(top));
  Constrain(*seq, r.token);
  if (IsStop(*seq, r.token)) {
    End(*seq, FinishReason::kStop, absl::OkStatus());
  } else if (seq->end_reason != FinishReason::kStop &&  // not a constraint's end (an error still counts)
             static_cast<int32_t>(seq->result.tokens.size()) >= seq->request.max_new_tokens) {
    seq->result.constraint_unfinished = seq->matcher && !seq->matcher->accepting();
    End(*seq, FinishReason::kLength, absl::OkStatus());
  }
}

// Retires what ended: cancelled or stopped meanwhile, generation done, or a
// scoring-only prompt fully computed. One also in the step behind this one
// ends when that one is applied (the workers write its blocks until then).
void Engine::RetireEnded(PlannedStep& plan) {
  for (Sequence* seq : plan.in_step) {
    const bool scored_only = seq->flight.steps == 0 && seq->request.max_new_tokens == 0 &&
                             seq->num_computed == static_cast<int32_t>(seq->tokens.size());
    if (scored_only) End(*seq, FinishReason::kLength, absl::OkStatus());
    RetireIfEnded(*seq);
  }
}

absl::Status Engine::ApplyStep(PlannedStep& plan, absl::StatusOr<std::vector<RowResult>> results) {
  SettleStep(plan, results.ok());
  RollBackProposals(plan);
  if (!results.ok()) {
    SettleProposals(plan, /*ran=*/false);
    // Fail the work in flight, keep the engine usable. A sequence also in
    // the step behind this one ends when that one is applied.
    // One that had already ended ends as it did: its tokens' steps ran.
    for (Sequence* seq : plan.in_step) {
      End(*seq, FinishReason::kNone, results.status());
      RetireIfEnded(*seq);
    }
    FlushKvEvents();
    return results.status();
  }
  PublishComputed(plan);
  ApplyRows(plan, *results);
  SettleProposals(plan, /*ran=*/true);
  RetireEnded(plan);
  FlushKvEvents();
  UpdateGauges();
  return absl::OkStatus();
}

}  // namespace shardlm
