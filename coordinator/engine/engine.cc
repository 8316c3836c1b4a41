#include "coordinator/engine/engine.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "coordinator/engine/service_metrics.h"

namespace shardlm {
namespace {

constexpr int64_t kMaxScoredRowsPerStep = 256;
constexpr int64_t kFirstStepTokens = 256;

Scheduler::Options SchedulerOptions(const Engine::Options& o) {
  Scheduler::Options s;
  s.policy = o.policy;
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
  k.record_events = o.kv_events != nullptr && o.prefix_caching;
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
  bounds.num_blocks = kv_.allocator().num_blocks();
  bounds.block_size = kv_.block_size();
  if (!r.prefix_handle.empty()) {
    SHARDLM_ASSIGN_OR_RETURN(bounds.prefix_length,
                             kv_.HandleLength(r.prefix_handle, r.owner, "prefix handle"));
    if (r.prefix_length > 0) bounds.prefix_length = std::min<int64_t>(bounds.prefix_length, r.prefix_length);
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
  if (!request.prefix_handle.empty()) {
    seq->tokens = kv_.Attach(*seq, request.prefix_handle, request.prefix_length);
  }
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
  if (options_.speculation.draft != nullptr) options_.speculation.draft->Forget(seq.id);
  absl::Status status = kv_.Retire(seq, std::move(seq.end_status));
  if (options_.metrics) RecordEnd(seq, status);
  seq.result.cached_tokens = seq.kv.cached_tokens;
  seq.result.handle = seq.kv.kept_handle;
  seq.result.handle_expiry_ms = seq.kv.kept_expiry_ms;
  seq.result.finish_reason = seq.end_reason;
  seq.result.first_token = seq.first_token;
  seq.result.last_token = seq.last_token;
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
  FlushKvEvents();
  UpdateGauges();
}

void Engine::FlushKvEvents() {
  if (options_.kv_events == nullptr) return;
  std::vector<KvEvent> events = kv_.TakeEvents();
  if (!events.empty()) options_.kv_events->Publish(std::move(events));
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

// A generating request's figures once it ends: time per output token, end-to-end latency,
// the ending by reason ("abort": cancelled or failed).
void Engine::RecordEnd(const Sequence& seq, const absl::Status& status) const {
  ServiceMetrics* m = options_.metrics;
  if (seq.request.max_new_tokens == 0) return;  // scoring and prefill: no generation to time
  const auto now = std::chrono::steady_clock::now();
  if (status.ok() && seq.result.tokens.size() >= 2) {
    const std::chrono::duration<double> span = now - seq.first_token;
    m->time_per_output_token->Observe(span.count() / static_cast<double>(seq.result.tokens.size() - 1));
  }
  const std::chrono::duration<double> e2e = now - seq.arrival;
  m->e2e_request_latency->Observe(e2e.count());
  m->RequestEnded(status.ok() ? FinishReasonName(seq.end_reason) : "abort");
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
  const int32_t total = blocks.num_referenced() + blocks.num_available();
  m->kv_cache_usage->Set(total > 0 ? static_cast<double>(blocks.num_referenced()) / total : 0.0);
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
  s.steps = steps_;
  s.preemptions = scheduler_.preemptions();
  s.proposed_tokens = proposed_tokens_;
  s.accepted_tokens = accepted_tokens_;
  s.lookup_proposed_tokens = lookup_proposed_tokens_;
  s.lookup_accepted_tokens = lookup_accepted_tokens_;
  return s;
}

}  // namespace shardlm
