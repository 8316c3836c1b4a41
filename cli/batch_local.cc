// `shardlm batch --model DIR`: every line on one Engine in this process (or
// over --tp worker processes), which is stepped until the file is done.
//
// The engine is fed a window of requests (twice --max-num-seqs, at least 64)
// so that its scheduler always has the next ones queued while memory stays
// bounded for long files. Stop strings are matched on the incremental
// detokenizer after each step, exactly as the Generate API matches them: the
// request is stopped at once, its tokens end with the one that completed the
// stop string and its text ends before it.
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "cli/batch.h"
#include "cli/batch_input.h"
#include "cli/commands.h"
#include "cli/constraint_flags.h"
#include "common/logging.h"
#include "common/status.h"
#include "coordinator/engine/engine.h"
#include "coordinator/engine/engine_runner.h"
#include "tokenizer/stop_text.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {

namespace {

// A line submitted to the engine and not yet finished.
struct Active {
  size_t slot = 0;
  int64_t id = 0;  // the engine's
  StopText text;
  std::string released;  // the text StopText has let through so far
  size_t tokens_seen = 0;
  size_t stop_at = 0;  // tokens kept when a stop string matched
};

// The request of line `slot`, with its on_token hooked to `active`.
absl::StatusOr<EngineRequest> Prepare(const BatchLine& line, LocalModel& model,
                                      std::unique_ptr<Active>* active) {
  const Tokenizer* tok = model.tokenizer.get();
  SHARDLM_ASSIGN_OR_RETURN(BatchItem item, ParseBatchLine(line.text));
  if (item.is_text) {
    if (tok == nullptr) {
      return absl::InvalidArgumentError("\"prompt\" needs tokenizer.json in the model; send \"prompt_ids\"");
    }
    auto ids = tok->Encode(item.text, /*add_special_tokens=*/true);
    if (!ids.ok()) return absl::InvalidArgumentError(absl::StrCat("\"prompt\": ", ids.status().message()));
    item.request.prompt = std::move(*ids);
  }
  if (!item.stop.empty() && tok == nullptr) {
    return absl::InvalidArgumentError("stop strings need a tokenizer.json in the model");
  }
  SHARDLM_ASSIGN_OR_RETURN(
      item.request.constraint,
      CompileForModel(model, item.constraint, std::string(KindName(item.constraint.kind))));
  *active = std::unique_ptr<Active>(new Active{0, 0, StopText(tok, std::move(item.stop)), ""});
  return std::move(item.request);
}

// Feeds the lines to the engine a window at a time, steps it, and records
// each line's result as it finishes.
class LocalBatchRun {
 public:
  LocalBatchRun(Engine& engine, LocalModel& model, const std::vector<BatchLine>& lines, BatchResults& results,
                size_t window)
      : engine_(engine), runner_(&engine), model_(model), lines_(lines), results_(results), window_(window) {}

  // Decode throughput: tokens after each request's first over the span from
  // the earliest first token to the latest last token.
  double DecodeTokensPerSecond() const {
    const double s = std::chrono::duration<double>(last_ - first_).count();
    return decode_tokens_ > 0 && s > 0 ? static_cast<double>(decode_tokens_) / s : 0.0;
  }

  absl::Status Run(const CliEnv& env) {
    results_.Start();
    absl::Status outcome = absl::OkStatus();
    while (next_ < lines_.size() || !active_.empty()) {
      if (env.stop != nullptr && env.stop->load()) outcome = Interrupt();
      while (outcome.ok() && next_ < lines_.size() && active_.size() < window_) SubmitLine(next_++);
      const int64_t steps_before = engine_.stats().steps;
      if (!engine_.Idle()) {
        // A failed step fails the requests in it (their results carry why); the engine goes on.
        // With worker processes the next step is queued behind the running one
        // (docs/scheduler.md, overlapped steps).
        absl::Status st = runner_.StepOverlapped();
        if (!st.ok()) LOG(WARNING) << "batch: a step failed: " << st;
      }
      for (int64_t id : to_stop_) engine_.Stop(id);
      to_stop_.clear();
      const size_t finished = CollectFinished();
      // A guard for a scheduler that can run nothing although work is queued.
      no_progress_ =
          (engine_.stats().steps == steps_before && finished == 0 && !active_.empty()) ? no_progress_ + 1 : 0;
      if (no_progress_ > 1000) {
        engine_.FailAll(
            absl::InternalError("the engine scheduled nothing for 1000 iterations with work queued"));
      }
      results_.ShowProgress();
    }
    return outcome;
  }

 private:
  // Cancels what runs; the lines not yet submitted say CANCELLED.
  absl::Status Interrupt() {
    for (const auto& [id, a] : active_) engine_.Cancel(id);
    for (; next_ < lines_.size(); ++next_)
      results_.Error(next_, absl::CancelledError("interrupted before it ran"));
    return absl::CancelledError("batch: interrupted; the lines not finished say CANCELLED");
  }

  void SubmitLine(size_t slot) {
    std::unique_ptr<Active> a;
    absl::StatusOr<EngineRequest> req = Prepare(lines_[slot], model_, &a);
    if (!req.ok()) return results_.Error(slot, req.status());
    Active* ap = a.get();
    ap->slot = slot;
    req->on_token = [ap, this](int32_t token, float, const std::vector<TopLogprob>&) {
      if (ap->text.stopped()) return;
      ++ap->tokens_seen;
      ap->released += ap->text.Add(token);
      if (!ap->text.stopped()) return;
      ap->stop_at = ap->tokens_seen;
      to_stop_.push_back(ap->id);
    };
    absl::StatusOr<int64_t> id = engine_.Submit(*std::move(req));
    if (!id.ok()) return results_.Error(slot, id.status());
    ap->id = *id;
    active_.emplace(*id, std::move(a));
  }

  // Records the lines whose requests finished; returns how many did.
  size_t CollectFinished() {
    std::vector<std::pair<int64_t, EngineResult>> finished = engine_.TakeFinished();
    for (auto& [id, r] : finished) {
      auto it = active_.find(id);
      if (it == active_.end()) continue;
      Active& a = *it->second;
      if (!r.status.ok()) {
        results_.Error(a.slot, r.status);
      } else {
        CountDecode(r);
        const bool stopped = a.text.stopped();
        if (stopped && r.tokens.size() > a.stop_at) r.tokens.resize(a.stop_at);
        results_.Ok(a.slot, r.tokens, a.released + a.text.Finish(),
                    stopped ? "stop" : FinishReasonName(r.finish_reason),
                    static_cast<int64_t>(r.prompt.size()));
      }
      active_.erase(it);
    }
    return finished.size();
  }

  // Counts a finished request into DecodeTokensPerSecond.
  void CountDecode(const EngineResult& r) {
    if (r.tokens.size() < 2) return;
    decode_tokens_ += static_cast<int64_t>(r.tokens.size()) - 1;
    if (first_ == std::chrono::steady_clock::time_point{} || r.first_token < first_) first_ = r.first_token;
    last_ = std::max(last_, r.last_token);
  }

  int64_t decode_tokens_ = 0;
  std::chrono::steady_clock::time_point first_{}, last_{};
  Engine& engine_;
  EngineRunner runner_;
  LocalModel& model_;
  const std::vector<BatchLine>& lines_;
  BatchResults& results_;
  const size_t window_;
  std::map<int64_t, std::unique_ptr<Active>> active_;  // by engine id
  std::vector<int64_t> to_stop_;                       // stop strings matched during the last step
  size_t next_ = 0;
  int no_progress_ = 0;
};

}  // namespace

absl::Status RunLocalBatch(const BatchFlags& f, const CliEnv& env, const std::vector<BatchLine>& lines,
                           BatchResults& results, BatchRunInfo* info) {
  Engine::Options eo;
  ApplySchedulingFlags(f.scheduling, f.local.engine, &eo);
  const size_t window = std::max<size_t>(64, 2 * static_cast<size_t>(eo.max_num_seqs));
  eo.max_queued_requests = static_cast<int32_t>(std::max<size_t>(eo.max_queued_requests, window));
  eo.max_queued_tokens = int64_t{1} << 50;  // the window bounds the queue
  info->mode = f.local.tp ? absl::StrCat("tp ", *f.local.tp) : "in-process";
  const auto load_start = std::chrono::steady_clock::now();
  SHARDLM_ASSIGN_OR_RETURN(LocalModel model, OpenModel(f.local, env, eo));
  info->load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  Engine& engine = *model.engine;
  LocalBatchRun run(engine, model, lines, results, window);
  absl::Status outcome = run.Run(env);
  info->decode_tokens_per_s = run.DecodeTokensPerSecond();
  const Engine::Stats stats = engine.stats();
  info->engine_steps = stats.steps;
  info->preemptions = stats.preemptions;
  info->proposed_tokens = stats.proposed_tokens;
  info->accepted_tokens = stats.accepted_tokens;
  info->lookup_proposed_tokens = stats.lookup_proposed_tokens;
  info->lookup_accepted_tokens = stats.lookup_accepted_tokens;
  return outcome;
}

}  // namespace shardlm
