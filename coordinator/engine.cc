#include "coordinator/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/random_token.h"
#include "common/status.h"
#include "coordinator/service_metrics.h"
#include "model/sampling.h"
#include "model/sampling_limits.h"

namespace shardlm {
namespace {
constexpr int64_t kMaxScoredRowsPerStep = 256;
constexpr int32_t kNextTopRow = -2;  // RowOwner::scored_index of a next-token top-n row
}  // namespace

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kNone:
      break;
  }
  return "none";
}

namespace {

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

}  // namespace

Engine::Engine(StepExecutor* executor, const ModelConfig& cfg, int32_t num_blocks, int32_t block_size,
               Options options)
    : executor_(executor),
      cfg_(cfg),
      block_size_(block_size),
      options_(options),
      allocator_(num_blocks),
      scheduler_(SchedulerOptions(options)) {
  UpdateGauges();  // the KV gauges show the free pool before the first step
  // Until a long step has been timed, steps are short enough to time safely.
  if (options_.target_step_ms > 0) scheduler_.LimitStepTokens(kFirstStepTokens);
}

namespace {

// InvalidArgument naming `field` (the field first, as the message starts:
// "temperature must be in ...").
template <typename... Parts>
absl::Status Bad(const std::string& field, const Parts&... parts) {
  return WithField(absl::InvalidArgumentError(absl::StrCat(parts...)), field);
}

// The sampling parameters and stop tokens against the one table of bounds
// (model/sampling_limits.h) and the vocabulary.
absl::Status ValidateSampling(const GenerateRequest& r, int64_t vocab_size) {
  const SamplingParams& s = r.sampling;
  const std::pair<const char*, std::pair<double, SamplingBound>> bounded[] = {
      {"temperature", {s.temperature, kTemperatureBound}},
      {"top_p", {s.top_p, kTopPBound}},
      {"min_p", {s.min_p, kMinPBound}},
      {"repetition_penalty", {s.repetition_penalty, kRepetitionPenaltyBound}},
      {"presence_penalty", {s.presence_penalty, kPresencePenaltyBound}},
      {"frequency_penalty", {s.frequency_penalty, kFrequencyPenaltyBound}},
  };
  for (const auto& [name, value_bound] : bounded) {
    const auto& [value, bound] = value_bound;
    if (!bound.Contains(value)) return Bad(name, name, " must be in ", bound.Text(), ", got ", value);
  }
  if (s.top_k < 0) return Bad("top_k", "top_k must be >= 0 (0 = off), got ", s.top_k);
  if (s.num_top_logprobs < 0 || s.num_top_logprobs > kMaxTopLogprobs) {
    return Bad("top_logprobs", "top logprobs must be in [0, ", kMaxTopLogprobs, "], got ",
               s.num_top_logprobs);
  }
  if (s.logit_bias.size() > kMaxLogitBiasEntries)
    return Bad("logit_bias", "logit_bias holds at most ", kMaxLogitBiasEntries, " entries, got ",
               s.logit_bias.size());
  for (const auto& [id, bias] : s.logit_bias) {
    if (id < 0 || id >= vocab_size) {
      return Bad("logit_bias", "logit_bias token id ", id, " is outside the vocabulary [0, ", vocab_size,
                 ")");
    }
    if (!kLogitBiasBound.Contains(bias))
      return Bad("logit_bias", "logit_bias for token ", id, " must be in ", kLogitBiasBound.Text(), ", got ",
                 bias);
  }
  for (int32_t id : r.stop_token_ids) {
    if (id < 0 || id >= vocab_size)
      return Bad("stop_token_ids", "stop token id ", id, " is outside the vocabulary [0, ", vocab_size, ")");
  }
  return absl::OkStatus();
}

}  // namespace

// The prompt (and its prefix handle) and the length asked for: within the
// vocabulary, the context and the KV cache.
absl::Status Engine::ValidateLength(const GenerateRequest& r) const {
  int64_t prefix_len = 0;
  if (!r.prefix_handle.empty()) {
    auto it = handles_.find(r.prefix_handle);
    if (it == handles_.end() || it->second.expiry_ms <= NowMs() || it->second.owner != r.owner) {
      return HandleNotFound("prefix handle", r.prefix_handle);
    }
    prefix_len = static_cast<int64_t>(it->second.tokens.size());
  }
  if (r.prompt.empty() && prefix_len == 0) return Bad("prompt", "prompt must hold at least one token");
  for (size_t i = 0; i < r.prompt.size(); ++i) {
    if (r.prompt[i] < 0 || r.prompt[i] >= cfg_.vocab_size) {
      return Bad("prompt", "prompt token ", i, " has id ", r.prompt[i], ", outside the vocabulary [0, ",
                 cfg_.vocab_size, ")");
    }
  }
  if (r.max_new_tokens < 0)
    return Bad("max_new_tokens", "max_new_tokens must be >= 0, got ", r.max_new_tokens);
  const int64_t total = prefix_len + static_cast<int64_t>(r.prompt.size()) + r.max_new_tokens;
  const int64_t prompt_len = prefix_len + static_cast<int64_t>(r.prompt.size());
  const std::string from_prefix = prefix_len > 0 ? absl::StrCat(" (", prefix_len, " from the prefix)") : "";
  if (r.max_new_tokens == 0 && total > cfg_.max_position_embeddings) {
    // Scoring and prefill generate nothing: only the prompt counts.
    return Bad("prompt", "prompt must hold at most ", cfg_.max_position_embeddings,
               " tokens (the context length); given ", prompt_len, from_prefix);
  }
  if (total > cfg_.max_position_embeddings) {
    return Bad("prompt", "prompt tokens + max_new_tokens must be <= ", cfg_.max_position_embeddings,
               " (the context length). Given: ", prefix_len + static_cast<int64_t>(r.prompt.size()),
               " prompt tokens", prefix_len > 0 ? absl::StrCat(" (", prefix_len, " from the prefix)") : "",
               " and ", r.max_new_tokens, " max_new_tokens");
  }
  const int64_t capacity = static_cast<int64_t>(allocator_.num_blocks()) * block_size_;
  if (r.max_new_tokens == 0 && total > capacity) {
    return Bad("prompt", "prompt must hold at most ", capacity,
               " tokens (the KV cache capacity: ", allocator_.num_blocks(), " blocks of ", block_size_,
               "); given ", prompt_len, from_prefix);
  }
  if (total > capacity) {
    return Bad("prompt", "prompt tokens + max_new_tokens must be <= ", capacity,
               " (the KV cache capacity). Given: ", r.prompt.size(), " prompt tokens and ", r.max_new_tokens,
               " max_new_tokens");
  }
  return absl::OkStatus();
}

absl::Status Engine::Validate(const GenerateRequest& r) const {
  SHARDLM_RETURN_IF_ERROR(ValidateLength(r));
  return ValidateSampling(r, cfg_.vocab_size);
}

absl::StatusOr<int64_t> Engine::Submit(GenerateRequest request) {
  absl::Status st = Validate(request);
  if (!st.ok()) return st;
  if (request.keep_handle && !request.transient_handle) {
    // Kept handles may pin only a share of the cache, so that they cannot
    // starve the requests that run.
    int64_t prefix_len = 0;
    if (!request.prefix_handle.empty()) prefix_len = handles_.at(request.prefix_handle).tokens.size();
    const int64_t total = prefix_len + static_cast<int64_t>(request.prompt.size()) + request.max_new_tokens;
    const int64_t adds = BlocksFor(total, block_size_) - prefix_len / block_size_;  // full blocks are shared
    const int64_t cap = static_cast<int64_t>(options_.max_handle_share * allocator_.num_blocks());
    const int64_t held = static_cast<int64_t>(HandleBlockSet().size());
    if (held + adds > cap) {
      return absl::ResourceExhaustedError(
          absl::StrCat("kept ChunkResult handles hold ", held, " KV blocks and this one would add up to ",
                       adds, ", over the limit of ", cap, " (--max-handle-share ", options_.max_handle_share,
                       " of ", allocator_.num_blocks(), " blocks); release handles you no longer need"));
    }
  }
  auto seq = std::make_unique<Sequence>();
  seq->id = next_id_++;
  if (!request.has_seed) request.sampling.seed = seed_rng_();
  if (!request.prefix_handle.empty()) {
    const Handle& handle = handles_.at(request.prefix_handle);
    seq->tokens = handle.tokens;
    absl::Status attached = Attach(*seq, handle);
    if (!attached.ok()) return attached;
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
    Evict(*seq);  // the handle's blocks it shared
    return queued;
  }
  const int64_t id = seq->id;
  seqs_[id] = std::move(seq);
  UpdateGauges();
  return id;
}

std::optional<GenerateResult> Engine::TakeResult(int64_t id) {
  auto it = done_.find(id);
  if (it == done_.end()) return std::nullopt;
  GenerateResult r = std::move(it->second);
  done_.erase(it);
  return r;
}

std::vector<std::pair<int64_t, GenerateResult>> Engine::TakeFinished() {
  std::vector<std::pair<int64_t, GenerateResult>> out;
  for (auto& [id, result] : done_) out.emplace_back(id, std::move(result));
  done_.clear();
  return out;
}

void Engine::FinishAndErase(Sequence& seq, FinishReason reason, absl::Status status) {
  scheduler_.Remove(&seq);
  Finish(seq, reason, std::move(status));
  seqs_.erase(seq.id);
  UpdateGauges();
}

bool Engine::EndRunning(int64_t id, FinishReason reason, absl::Status status) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return false;
  Sequence& seq = *it->second;
  if (seq.in_flight) {
    // The workers are writing its blocks: end it when the step is applied.
    RequestEnd(seq, reason, std::move(status));
    return true;
  }
  FinishAndErase(seq, reason, std::move(status));
  return true;
}

void Engine::RequestEnd(Sequence& seq, FinishReason reason, absl::Status status) {
  if (!seq.end_requested) {
    seq.end_requested = true;
    seq.end_reason = reason;
    seq.end_status = std::move(status);
  }
  seq.lookahead = false;
}

void Engine::FailAll(const absl::Status& status) {
  while (!seqs_.empty()) {
    Sequence& seq = *seqs_.begin()->second;
    CHECK(!seq.in_flight) << "Engine::FailAll with a step executing";
    FinishAndErase(seq, FinishReason::kNone, status);
  }
}

void Engine::Reset(int32_t num_blocks, const std::string& why) {
  CHECK(seqs_.empty()) << "Engine::Reset with requests running";
  constexpr size_t kMaxLostHandles = 100000;
  for (auto& [id, handle] : handles_) {
    lost_handles_[id] = why;
    lost_order_.push_back(id);
  }
  while (lost_order_.size() > kMaxLostHandles) {
    lost_handles_.erase(lost_order_.front());
    lost_order_.pop_front();
  }
  handles_.clear();
  allocator_ = BlockAllocator(num_blocks);
  UpdateGauges();
}

bool Engine::Stop(int64_t id) { return EndRunning(id, FinishReason::kStop, absl::OkStatus()); }

bool Engine::Cancel(int64_t id) {
  return EndRunning(id, FinishReason::kNone, absl::CancelledError("request cancelled"));
}

void Engine::Admit(SchedSeq& s) {
  Sequence& seq = static_cast<Sequence&>(s);
  // Scoring needs logits at every prompt position, so it computes them all.
  // Once per admission: after its first step the sequence publishes instead.
  if (options_.prefix_caching && !seq.request.score_prompt && !seq.started &&
      seq.num_computed == static_cast<int32_t>(seq.blocks.size()) * block_size_) {
    LookupPrefix(seq);
  }
}

int32_t Engine::BlocksShort(const SchedSeq& s, int32_t tokens) const {
  const Sequence& seq = static_cast<const Sequence&>(s);
  return std::max(0, BlocksFor(tokens, block_size_) - static_cast<int32_t>(seq.blocks.size()));
}

std::unordered_set<int32_t> Engine::HandleBlockSet() const {
  std::unordered_set<int32_t> blocks;
  for (const auto& [id, h] : handles_) blocks.insert(h.blocks.begin(), h.blocks.end());
  return blocks;
}

void Engine::Evict(SchedSeq& s) {
  Sequence& seq = static_cast<Sequence&>(s);
  seq.started = false;
  allocator_.Release(seq.blocks);
  seq.blocks.clear();
  seq.hashes.clear();
  for (const auto& [src, dst] : seq.copies) allocator_.Release(src);
  seq.copies.clear();
  if (seq.cow_src >= 0) allocator_.Release(seq.cow_src);
  seq.cow_src = -1;
  seq.num_computed = 0;  // recomputed from its tokens when it runs again
}

void Engine::Grow(SchedSeq& s, int32_t tokens) {
  Sequence& seq = static_cast<Sequence&>(s);
  const int32_t need = BlocksShort(seq, tokens);
  if (need <= 0) return;
  auto ids = allocator_.Allocate(need);
  CHECK(ids.ok()) << ids.status();
  if (seq.cow_src >= 0) {
    seq.copies.emplace_back(seq.cow_src, (*ids)[0]);  // its reference is dropped once copied
    seq.cow_src = -1;
  }
  seq.blocks.insert(seq.blocks.end(), ids->begin(), ids->end());
}

void Engine::Finish(Sequence& seq, FinishReason reason, absl::Status status) {
  for (const auto& [src, dst] : seq.copies) allocator_.Release(src);
  seq.copies.clear();
  if (seq.cow_src >= 0) allocator_.Release(seq.cow_src);
  seq.cow_src = -1;
  // A step run behind the last token (overlapped steps) may have added a
  // block past the tokens: a handle holds only the tokens' blocks.
  const size_t needed = static_cast<size_t>(BlocksFor(static_cast<int64_t>(seq.tokens.size()), block_size_));
  if (seq.blocks.size() > needed) {
    allocator_.Release(std::vector<int32_t>(seq.blocks.begin() + needed, seq.blocks.end()));
    seq.blocks.resize(needed);
  }
  if (status.ok() && seq.request.keep_handle && !seq.request.transient_handle) {
    // Submit checked the share; concurrent keeps may have used it up since.
    const int64_t cap = static_cast<int64_t>(options_.max_handle_share * allocator_.num_blocks());
    std::unordered_set<int32_t> held = HandleBlockSet();
    const size_t before = held.size();
    held.insert(seq.blocks.begin(), seq.blocks.end());
    if (static_cast<int64_t>(held.size()) > cap) {
      status = absl::ResourceExhaustedError(absl::StrCat(
          "kept ChunkResult handles would hold ", held.size(), " KV blocks (", before,
          " before this one), over the limit of ", cap, " (--max-handle-share ", options_.max_handle_share,
          " of ", allocator_.num_blocks(), " blocks); release handles you no longer need"));
    }
  }
  if (status.ok() && seq.request.keep_handle) {
    Handle h;
    h.owner = seq.request.owner;
    h.tokens = seq.tokens;
    // A step that ran behind the last token (overlapped steps) computed a
    // position past it: only the tokens' positions count.
    h.num_computed = std::min(seq.num_computed, static_cast<int32_t>(seq.tokens.size()));
    h.blocks = std::move(seq.blocks);
    h.expiry_ms = NowMs() + options_.handle_ttl_ms;
    // 128 bits from the OS's CSPRNG: a handle cannot be guessed from others.
    const std::string id = RandomToken(16);
    seq.result.handle = id;
    seq.result.handle_expiry_ms = h.expiry_ms;
    handles_[id] = std::move(h);
  } else {
    allocator_.Release(seq.blocks);
  }
  seq.blocks.clear();
  if (options_.metrics && status.ok() && seq.result.tokens.size() >= 2) {
    const std::chrono::duration<double> span = std::chrono::steady_clock::now() - seq.first_token;
    options_.metrics->time_per_output_token->Observe(span.count() /
                                                     static_cast<double>(seq.result.tokens.size() - 1));
  }
  seq.result.finish_reason = reason;
  seq.result.status = std::move(status);
  done_[seq.id] = std::move(seq.result);
}

bool Engine::IsStop(const Sequence& seq, int32_t token) const {
  const auto& stops = seq.request.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), token) != stops.end()) return true;
  if (seq.request.ignore_eos) return false;
  return std::find(cfg_.eos_token_ids.begin(), cfg_.eos_token_ids.end(), token) != cfg_.eos_token_ids.end();
}

void Engine::MaskRow(Sequence& seq, SampleRow& row) {
  if (!seq.matcher || !ComputeMasks({&seq})[0]) return;
  row.allowed = seq.mask.data();
  row.allowed_words = static_cast<int64_t>(seq.mask.size());
}

std::vector<bool> Engine::ComputeMasks(const std::vector<Sequence*>& seqs) {
  std::vector<absl::Status> done(seqs.size());
  std::vector<double> seconds(seqs.size());
  auto one = [&](size_t i) {
    const auto t0 = std::chrono::steady_clock::now();
    done[i] = seqs[i]->matcher->ComputeMask(seqs[i]->mask);
    seconds[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // Each matcher is its own object: a few threads take a share each, this
  // one included (about 0.3 ms a mask on a 49k vocabulary).
  const size_t threads = std::min<size_t>(seqs.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < threads; ++t) {
    helpers.emplace_back([&, t] {
      for (size_t i = t; i < seqs.size(); i += threads) one(i);
    });
  }
  for (size_t i = 0; i < seqs.size(); i += threads) one(i);
  for (std::thread& h : helpers) h.join();
  std::vector<bool> ok(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (options_.metrics) options_.metrics->constraint_mask->Observe(seconds[i]);
    ok[i] = done[i].ok();
    if (!ok[i]) RequestEnd(*seqs[i], FinishReason::kNone, done[i]);
  }
  return ok;
}

void Engine::SendFollowingMasks(PlannedStep& plan, PendingStep& pending) {
  if (plan.masks_follow.empty()) return;
  // A sequence that ended with the step just applied samples nothing wanted:
  // its row gets no mask (every token) rather than a matcher past its end.
  std::vector<Sequence*> live;
  std::vector<size_t> live_index;
  for (size_t i = 0; i < plan.masks_follow.size(); ++i) {
    Sequence* seq = plan.masks_follow[i].second;
    if (seq->end_requested || seq->result.finish_reason != FinishReason::kNone) continue;
    live.push_back(seq);
    live_index.push_back(i);
  }
  const std::vector<bool> ok = ComputeMasks(live);
  std::vector<RowMask> masks(plan.masks_follow.size());
  for (size_t i = 0; i < masks.size(); ++i) masks[i].row = plan.masks_follow[i].first;
  for (size_t j = 0; j < live.size(); ++j) {
    if (ok[j]) masks[live_index[j]].allowed = live[j]->mask;
  }
  pending.SendMasks(std::move(masks));
}

void Engine::Constrain(Sequence& seq, int32_t token) {
  if (!seq.matcher) return;
  if (absl::Status st = seq.matcher->Consume(token); !st.ok()) {
    RequestEnd(seq, FinishReason::kNone, st);
    return;
  }
  if (seq.matcher->stopped()) seq.result.finish_reason = FinishReason::kStop;
}

std::unique_ptr<Engine::PlannedStep> Engine::PlanStep(bool ahead) {
  ExpireHandles();
  const int64_t preemptions_before = scheduler_.preemptions();
  const std::vector<Scheduler::Work> work = scheduler_.Schedule(*this);
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
  const int64_t tokens = static_cast<int64_t>(seq.tokens.size());
  FinishAndErase(seq, FinishReason::kNone,
                 absl::ResourceExhaustedError(absl::StrCat(
                     "KV cache too small for the request: it needs ", BlocksFor(tokens, block_size_),
                     " blocks of ", block_size_, " tokens, ", allocator_.num_available(), " of ",
                     allocator_.num_blocks(), " are free and ", HandleBlockSet().size(),
                     " are held by ChunkResult handles (release unused handles)")));
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
      CHECK(ahead && pos == known && seq.pending == 1 && seq.pending_row >= 0)
          << "planned an unknown token: position " << pos << " of " << known;
      step.feedback.emplace_back(static_cast<int32_t>(step.token_ids.size()), seq.pending_row);
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
  seq.ahead += take;
  ++seq.in_flight;
  if (samples) ++seq.pending;
  // Goes on in the step planned behind this one (whether this one was
  // planned ahead or not) unless it certainly ends with it.
  seq.lookahead = overlaps() && samples && !seq.end_requested &&
                  static_cast<int32_t>(seq.result.tokens.size()) + seq.pending < seq.request.max_new_tokens;
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
  row.draw_seed = DrawSeed(seq.request.sampling.seed, seq.result.tokens.size() + seq.pending);
  if (seq.matcher && seq.pending > 0) {
    // Its mask needs the token the step in flight samples.
    row.mask_follows = true;
    plan.masks_follow.emplace_back(static_cast<int32_t>(step.rows.size()), &seq);
  } else {
    MaskRow(seq, row);
  }
  seq.pending_row = static_cast<int32_t>(step.rows.size());
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

void Engine::LearnStepCost(const PlannedStep& plan) {
  // A step's own time: overlapped, it started computing when the one before
  // it came back. Short steps are mostly fixed cost, so only long ones teach
  // the cost of a token (an overestimate by the fixed part: on the safe side).
  constexpr size_t kMinTokens = 128;
  const auto began = std::max(plan.started, last_finished_);
  last_finished_ = plan.finished;
  if (options_.target_step_ms <= 0 || plan.finished == std::chrono::steady_clock::time_point{} ||
      plan.input.token_ids.size() < kMinTokens) {
    return;
  }
  const double took = std::chrono::duration<double>(plan.finished - began).count();
  const double per_token = took / static_cast<double>(plan.input.token_ids.size());
  seconds_per_token_ = seconds_per_token_ == 0 ? per_token : 0.5 * seconds_per_token_ + 0.5 * per_token;
  const int64_t limit = static_cast<int64_t>(options_.target_step_ms / 1000.0 / seconds_per_token_);
  scheduler_.LimitStepTokens(std::max<int64_t>(limit, kMinTokens));
}

// The step's bookkeeping undone whatever its outcome: in-flight counts, rows
// pending, copied blocks released.
void Engine::SettleStep(PlannedStep& plan) {
  --steps_in_flight_;
  LearnStepCost(plan);
  for (size_t k = 0; k < plan.in_step.size(); ++k) {
    Sequence* seq = plan.in_step[k];
    --seq->in_flight;
    seq->ahead -= plan.takes[k];
  }
  for (const RowOwner& o : plan.owners) {
    if (o.scored_index == -1) --o.seq->pending;  // in `tokens` below, or dropped
  }
  for (const auto& [src, dst] : plan.copies) allocator_.Release(src);  // copied now (or never needed)
}

// The computed blocks published to the prefix cache, prompt tokens counted.
void Engine::PublishComputed(PlannedStep& plan) {
  for (Sequence* seq : plan.in_step) {
    // One whose earlier step failed has positions nobody wrote.
    if (options_.prefix_caching && (!seq->end_requested || seq->end_status.ok())) PublishBlocks(*seq);
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
    seq->result.finish_reason = FinishReason::kStop;
  } else if (seq->result.finish_reason == FinishReason::kNone &&
             static_cast<int32_t>(seq->result.tokens.size()) >= seq->request.max_new_tokens) {
    seq->result.finish_reason = FinishReason::kLength;
    seq->result.constraint_unfinished = seq->matcher && !seq->matcher->accepting();
  }
}

// Retires what ended: cancelled or stopped meanwhile, generation done, or a
// scoring-only prompt fully computed. One also in the step behind this one
// ends when that one is applied (the workers write its blocks until then).
void Engine::RetireEnded(PlannedStep& plan) {
  for (Sequence* seq : plan.in_step) {
    if (seq->in_flight) {
      if (seq->result.finish_reason != FinishReason::kNone) RequestEnd(*seq, seq->result.finish_reason, {});
      continue;
    }
    const bool scored_only =
        seq->request.max_new_tokens == 0 && seq->num_computed == static_cast<int32_t>(seq->tokens.size());
    if (seq->end_requested) {
      FinishAndErase(*seq, seq->end_reason, seq->end_status);
    } else if (seq->result.finish_reason != FinishReason::kNone || scored_only) {
      FinishAndErase(*seq, scored_only ? FinishReason::kLength : seq->result.finish_reason);
    }
  }
}

absl::Status Engine::ApplyStep(PlannedStep& plan, absl::StatusOr<std::vector<RowResult>> results) {
  SettleStep(plan);
  if (!results.ok()) {
    // Fail the work in flight, keep the engine usable. A sequence also in
    // the step behind this one ends when that one is applied.
    // One that had already ended ends as it did: its tokens' steps ran.
    for (Sequence* seq : plan.in_step) {
      RequestEnd(*seq, FinishReason::kNone, results.status());
      if (!seq->in_flight) FinishAndErase(*seq, seq->end_reason, seq->end_status);
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
  m->kv_blocks_used->Set(allocator_.num_referenced());
  m->kv_blocks_free->Set(allocator_.num_available() - allocator_.num_cached());
  m->kv_blocks_cached->Set(allocator_.num_cached());
  m->handles->Set(static_cast<double>(handles_.size()));
}

absl::StatusOr<GenerateResult> Engine::Run(GenerateRequest request) {
  auto id = Submit(std::move(request));
  if (!id.ok()) return id.status();
  while (!done_.count(*id)) {
    absl::Status st = Step();
    if (!st.ok() && !done_.count(*id)) return st;
  }
  GenerateResult r = *TakeResult(*id);
  if (!r.status.ok()) return r.status;
  return r;
}

}  // namespace shardlm
