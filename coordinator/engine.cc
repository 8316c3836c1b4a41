#include "coordinator/engine.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "coordinator/service_metrics.h"
#include "model/sampling.h"

namespace shardlm {
namespace {

constexpr int64_t kMaxScoredRowsPerStep = 256;
constexpr int32_t kNextTopRow = -2;  // RowOwner::scored_index of a next-token top-n row
constexpr int64_t kFirstStepTokens = 256;

Scheduler::Options SchedulerOptions(const Engine::Options& o) {
  Scheduler::Options s;
  CHECK(Scheduler::ParsePolicy(o.policy, &s.policy).ok()) << "unknown policy " << o.policy;
  s.max_num_seqs = o.max_num_seqs;
  s.max_batch_tokens = o.max_batch_tokens;
  s.max_queued_requests = o.max_queued_requests;
  s.max_queued_tokens = o.max_queued_tokens;
  return s;
}

KvManager::Options KvOptions(const Engine::Options& o, int32_t block_size) {
  KvManager::Options k;
  k.block_size = block_size;
  k.max_handle_share = o.max_handle_share;
  k.handle_ttl_ms = o.handle_ttl_ms;
  k.prefix_caching = o.prefix_caching;
  k.metrics = o.metrics;
  return k;
}

}  // namespace

Engine::Engine(StepExecutor* executor, const ModelConfig& cfg, int32_t num_blocks, int32_t block_size,
               Options options)
    : executor_(executor),
      cfg_(cfg),
      options_(options),
      kv_(num_blocks, KvOptions(options, block_size)),
      scheduler_(SchedulerOptions(options)) {
  UpdateGauges();  // the KV gauges show the free pool before the first step
  // Until steps have been timed, they are short enough to time safely.
  if (options_.target_step_ms > 0) scheduler_.LimitStepTokens(kFirstStepTokens);
}

absl::Status Engine::Validate(const EngineRequest& r) const {
  RequestBounds bounds;
  bounds.vocab_size = cfg_.vocab_size;
  bounds.context_length = cfg_.max_position_embeddings;
  bounds.num_blocks = num_blocks();
  bounds.block_size = kv_.block_size();
  if (!r.prefix_handle.empty()) {
    SHARDLM_ASSIGN_OR_RETURN(bounds.prefix_length,
                             kv_.HandleLength(r.prefix_handle, r.owner, "prefix handle"));
  }
  return ValidateRequest(r, bounds);
}

absl::StatusOr<int64_t> Engine::Submit(EngineRequest request) {
  absl::Status st = Validate(request);
  if (!st.ok()) return st;
  SHARDLM_RETURN_IF_ERROR(kv_.CheckShare(request));
  auto seq = std::make_unique<Sequence>();
  seq->id = next_id_++;
  if (!request.has_seed) request.sampling.seed = seed_rng_();
  if (!request.prefix_handle.empty()) kv_.Attach(*seq, request.prefix_handle);
  seq->prompt_offset = static_cast<int32_t>(seq->tokens.size());
  seq->result.prefix_tokens = seq->prompt_offset;
  seq->tokens.insert(seq->tokens.end(), request.prompt.begin(), request.prompt.end());
  seq->context = seq->tokens;
  seq->result.prompt = request.prompt;
  if (request.score_prompt) {
    seq->result.prompt_scores.resize(request.prompt.size());
    seq->result.prompt_top.resize(request.prompt.size());
  }
  seq->request = std::move(request);
  if (seq->request.constraint) {
    seq->matcher = seq->request.constraint->Clone();
    if (!seq->matcher) return absl::InternalError("constraint: the matcher could not be copied");
  }
  // Scoring rows carry a full-vocabulary distribution each: keep chunks small.
  if (seq->request.score_prompt) seq->max_chunk = kMaxScoredRowsPerStep;
  seq->arrival = seq->request.arrival != std::chrono::steady_clock::time_point{}
                     ? seq->request.arrival
                     : std::chrono::steady_clock::now();
  if (absl::Status queued = scheduler_.Enqueue(seq.get()); !queued.ok()) {
    kv_.Evict(*seq);  // the handle's blocks it shared
    return queued;
  }
  const int64_t id = seq->id;
  seqs_[id] = std::move(seq);
  UpdateGauges();
  return id;
}

std::optional<EngineResult> Engine::TakeResult(int64_t id) {
  auto it = done_.find(id);
  if (it == done_.end()) return std::nullopt;
  EngineResult r = std::move(it->second);
  done_.erase(it);
  return r;
}

std::vector<std::pair<int64_t, EngineResult>> Engine::TakeFinished() {
  std::vector<std::pair<int64_t, EngineResult>> out;
  for (auto& [id, result] : done_) out.emplace_back(id, std::move(result));
  done_.clear();
  return out;
}

void Engine::End(Sequence& seq, FinishReason reason, absl::Status status) {
  if (!seq.end_requested) {
    seq.end_requested = true;
    seq.end_reason = reason;
    seq.end_status = std::move(status);
  }
  seq.flight.lookahead = false;
}

bool Engine::RetireIfEnded(Sequence& seq) {
  if (!seq.end_requested || seq.flight.steps > 0) return false;
  scheduler_.Remove(&seq);
  absl::Status status = kv_.Retire(seq, std::move(seq.end_status));
  if (options_.metrics && status.ok() && seq.result.tokens.size() >= 2) {
    const std::chrono::duration<double> span = std::chrono::steady_clock::now() - seq.first_token;
    options_.metrics->time_per_output_token->Observe(span.count() /
                                                     static_cast<double>(seq.result.tokens.size() - 1));
  }
  seq.result.finish_reason = seq.end_reason;
  seq.result.status = std::move(status);
  done_[seq.id] = std::move(seq.result);
  seqs_.erase(seq.id);
  UpdateGauges();
  return true;
}

Sequence* Engine::Find(int64_t id) {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

void Engine::FailAll(const absl::Status& status) {
  while (!seqs_.empty()) {
    Sequence& seq = *seqs_.begin()->second;
    CHECK(seq.flight.steps == 0) << "Engine::FailAll with a step executing";
    End(seq, FinishReason::kNone, status);
    RetireIfEnded(seq);
  }
}

void Engine::Reset(int32_t num_blocks, const std::string& why) {
  CHECK(seqs_.empty()) << "Engine::Reset with requests running";
  kv_.Reset(num_blocks, why);
  UpdateGauges();
}

// A sequence in a step executing ends when that step is applied (the
// workers are writing its blocks).
bool Engine::Stop(int64_t id) { return EndNow(id, FinishReason::kStop, absl::OkStatus()); }

bool Engine::Cancel(int64_t id) {
  return EndNow(id, FinishReason::kNone, absl::CancelledError("request cancelled"));
}

bool Engine::EndNow(int64_t id, FinishReason reason, absl::Status status) {
  Sequence* seq = Find(id);
  if (seq == nullptr) return false;
  End(*seq, reason, std::move(status));
  RetireIfEnded(*seq);
  return true;
}

bool Engine::IsStop(const Sequence& seq, int32_t token) const {
  const auto& stops = seq.request.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), token) != stops.end()) return true;
  if (seq.request.ignore_eos) return false;
  return std::find(cfg_.eos_token_ids.begin(), cfg_.eos_token_ids.end(), token) != cfg_.eos_token_ids.end();
}

std::unique_ptr<Engine::PlannedStep> Engine::PlanStep(bool ahead) {
  ExpireHandles();
  const int64_t preemptions_before = scheduler_.preemptions();
  const std::vector<Scheduler::Work> work = scheduler_.Schedule(kv_);
  if (options_.metrics && scheduler_.preemptions() > preemptions_before) {
    options_.metrics->preemptions->Add(static_cast<double>(scheduler_.preemptions() - preemptions_before));
  }
  if (work.empty()) {
    // With a step in flight, the blocks it holds come back when it is applied.
    if (!seqs_.empty() && scheduler_.preemptions() == preemptions_before && steps_in_flight_ == 0) {
      FailUnschedulable();
    }
    UpdateGauges();
    return nullptr;
  }
  auto plan = std::make_unique<PlannedStep>();
  for (const Scheduler::Work& w : work) PlanSequence(*plan, *static_cast<Sequence*>(w.seq), w.tokens, ahead);
  ++steps_;
  ++steps_in_flight_;
  UpdateGauges();
  return plan;
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
  for (int32_t i = 0; i < take; ++i) {
    const int32_t pos = seq.num_computed + i;
    if (pos < known) {
      step.token_ids.push_back(seq.tokens[pos]);
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
    plan.owners.push_back({&seq, kNextTopRow});
  }
  const bool samples = reaches_end && seq.request.max_new_tokens > 0;
  if (samples) AddSampleRow(plan, seq, first_row + take - 1, seq_index);
  // The step counts as computed from now on; its sampled token is pending.
  seq.num_computed += take;
  seq.flight.ahead += take;
  ++seq.flight.steps;
  if (samples) ++seq.flight.pending;
  // Goes on in the step planned behind this one (whether this one was
  // planned ahead or not) unless it certainly ends with it.
  seq.flight.lookahead =
      overlaps() && samples && !seq.end_requested &&
      static_cast<int32_t>(seq.result.tokens.size()) + seq.flight.pending < seq.request.max_new_tokens;
  step.block_tables.push_back(seq.blocks);
  step.request_ids.push_back(seq.request.request_id);
  step.starts.push_back(!seq.started);
  seq.started = true;
  step.block_copies.insert(step.block_copies.end(), seq.copies.begin(), seq.copies.end());
  plan.copies.insert(plan.copies.end(), seq.copies.begin(), seq.copies.end());
  seq.copies.clear();
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

absl::StatusOr<std::vector<RowResult>> Engine::ExecuteStep(PlannedStep& plan) {
  std::unique_ptr<PendingStep> pending = StartStep(plan);
  return WaitStep(plan, *pending);
}

std::unique_ptr<PendingStep> Engine::StartStep(PlannedStep& plan) {
  plan.started = std::chrono::steady_clock::now();
  return executor_->StartStep(plan.input);
}

absl::StatusOr<std::vector<RowResult>> Engine::WaitStep(PlannedStep& plan, PendingStep& pending) {
  // From sending to the rows back (overlapped: including the wait behind the step before).
  const auto start = plan.started;
  auto results = pending.Wait();
  plan.finished = std::chrono::steady_clock::now();
  if (options_.metrics) {
    // The metrics are atomics: counting here needs no lock.
    const std::chrono::duration<double> took = plan.finished - start;
    options_.metrics->steps->Add();
    options_.metrics->step_tokens->Add(static_cast<double>(plan.input.token_ids.size()));
    options_.metrics->step_duration->Observe(took.count());
  }
  return results;
}

absl::Status Engine::Step() {
  std::unique_ptr<PlannedStep> plan = PlanStep();
  if (!plan) return absl::OkStatus();
  return ApplyStep(*plan, ExecuteStep(*plan));
}

absl::Status Engine::StepOverlapped() {
  if (!overlaps()) return Step();
  if (!queued_) {
    queued_ = PlanStep();
    if (!queued_) return absl::OkStatus();
    queued_pending_ = StartStep(*queued_);
  }
  std::unique_ptr<PlannedStep> next = PlanStep(/*ahead=*/true);
  std::unique_ptr<PendingStep> next_pending = next ? StartStep(*next) : nullptr;
  absl::Status st = ApplyStep(*queued_, WaitStep(*queued_, *queued_pending_));
  if (next) SendFollowingMasks(*next, *next_pending);
  queued_ = std::move(next);
  queued_pending_ = std::move(next_pending);
  return st;
}

void Engine::LearnStepCost(const PlannedStep& plan, bool ran) {
  // A step's own time: overlapped, it started computing when the one before
  // it came back.
  const auto began = std::max(plan.started, last_finished_);
  last_finished_ = plan.finished;
  // A failed step's time says nothing of the cost (a hang ran to the step
  // timeout; a refusal came back at once).
  const bool timed = plan.finished != std::chrono::steady_clock::time_point{};
  if (options_.target_step_ms <= 0 || !ran || !timed) return;
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
  if (owner.scored_index == kNextTopRow) {
    seq->result.next_top = std::move(top);
    return;
  }
  if (owner.scored_index >= 0) {
    seq->result.prompt_scores[owner.scored_index] = r.target_logprob;
    seq->result.prompt_top[owner.scored_index] = std::move(top);
    return;
  }
  if (seq->result.tokens.empty()) {
    seq->first_token = std::chrono::steady_clock::now();
    const std::chrono::duration<double> ttft = seq->first_token - seq->arrival;
    if (options_.metrics) options_.metrics->time_to_first_token->Observe(ttft.count());
  }
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
  if (!results.ok()) {
    // Fail the work in flight, keep the engine usable. A sequence also in
    // the step behind this one ends when that one is applied.
    // One that had already ended ends as it did: its tokens' steps ran.
    for (Sequence* seq : plan.in_step) {
      End(*seq, FinishReason::kNone, results.status());
      RetireIfEnded(*seq);
    }
    return results.status();
  }
  PublishComputed(plan);
  for (size_t i = 0; i < plan.owners.size(); ++i) ApplyRow(plan.owners[i], (*results)[i]);
  RetireEnded(plan);
  UpdateGauges();
  return absl::OkStatus();
}

void Engine::UpdateGauges() const {
  ServiceMetrics* m = options_.metrics;
  if (m == nullptr) return;
  m->requests_running->Set(static_cast<double>(scheduler_.running().size()));
  m->requests_waiting->Set(static_cast<double>(scheduler_.waiting().size()));
  const BlockAllocator& blocks = kv_.allocator();
  m->kv_blocks_used->Set(blocks.num_referenced());
  m->kv_blocks_free->Set(blocks.num_available() - blocks.num_cached());
  m->kv_blocks_cached->Set(blocks.num_cached());
  m->handles->Set(kv_.num_handles());
}

void Engine::ExpireHandles() {
  if (kv_.ExpireHandles()) UpdateGauges();
}

absl::Status Engine::CheckHandle(const std::string& handle, const std::string& owner) const {
  return kv_.CheckHandle(handle, owner);
}

absl::Status Engine::ReleaseHandle(const std::string& handle, const std::string& owner) {
  absl::Status st = kv_.ReleaseHandle(handle, owner);
  UpdateGauges();
  return st;
}

Engine::Stats Engine::stats() const {
  const BlockAllocator& blocks = kv_.allocator();
  Stats s;
  s.num_blocks = blocks.num_blocks();
  s.free_blocks = blocks.num_available();
  s.cached_blocks = blocks.num_cached();
  s.referenced_blocks = blocks.num_referenced();
  s.running = static_cast<int32_t>(scheduler_.running().size());
  s.waiting = static_cast<int32_t>(scheduler_.waiting().size());
  s.handles = kv_.num_handles();
  s.prefix_cache_hits = blocks.cache_hits();
  return s;
}

absl::StatusOr<EngineResult> Engine::Run(EngineRequest request) {
  auto id = Submit(std::move(request));
  if (!id.ok()) return id.status();
  while (!done_.count(*id)) {
    absl::Status st = Step();
    if (!st.ok() && !done_.count(*id)) return st;
  }
  EngineResult r = *TakeResult(*id);
  if (!r.status.ok()) return r.status;
  return r;
}

}  // namespace shardlm
