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
#include "coordinator/engine.h"
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

  results.Start();
  std::map<int64_t, std::unique_ptr<Active>> active;  // by engine id
  std::vector<int64_t> to_stop;                       // stop strings matched during the last step
  size_t next = 0;
  int no_progress = 0;
  absl::Status outcome = absl::OkStatus();
  while (next < lines.size() || !active.empty()) {
    if (env.stop != nullptr && env.stop->load()) {
      for (const auto& [id, a] : active) engine.Cancel(id);
      for (; next < lines.size(); ++next)
        results.Error(next, absl::CancelledError("interrupted before it ran"));
      outcome = absl::CancelledError("batch: interrupted; the lines not finished say CANCELLED");
    }
    while (outcome.ok() && next < lines.size() && active.size() < window) {
      const size_t slot = next++;
      std::unique_ptr<Active> a;
      absl::StatusOr<EngineRequest> req = Prepare(lines[slot], model, &a);
      if (req.ok()) {
        Active* ap = a.get();
        ap->slot = slot;
        req->on_token = [ap, &to_stop](int32_t token, float, const std::vector<TopLogprob>&) {
          if (ap->text.stopped()) return;
          ++ap->tokens_seen;
          ap->released += ap->text.Add(token);
          if (!ap->text.stopped()) return;
          ap->stop_at = ap->tokens_seen;
          to_stop.push_back(ap->id);
        };
        absl::StatusOr<int64_t> id = engine.Submit(*std::move(req));
        if (!id.ok()) {
          results.Error(slot, id.status());
          continue;
        }
        ap->id = *id;
        active.emplace(*id, std::move(a));
        continue;
      }
      results.Error(slot, req.status());
    }
    const int64_t steps_before = engine.steps();
    if (!engine.Idle()) {
      // A failed step fails the requests in it (their results carry why); the engine goes on.
      // With worker processes the next step is queued behind the running one
      // (docs/scheduler.md, overlapped steps).
      absl::Status st = engine.StepOverlapped();
      if (!st.ok()) LOG(WARNING) << "batch: a step failed: " << st;
    }
    for (int64_t id : to_stop) engine.Stop(id);
    to_stop.clear();
    std::vector<std::pair<int64_t, EngineResult>> finished = engine.TakeFinished();
    for (auto& [id, r] : finished) {
      auto it = active.find(id);
      if (it == active.end()) continue;
      Active& a = *it->second;
      if (!r.status.ok()) {
        results.Error(a.slot, r.status);
      } else {
        const bool stopped = a.text.stopped();
        if (stopped && r.tokens.size() > a.stop_at) r.tokens.resize(a.stop_at);
        results.Ok(a.slot, r.tokens, a.released + a.text.Finish(),
                   stopped ? "stop" : FinishReasonName(r.finish_reason),
                   static_cast<int64_t>(r.prompt.size()));
      }
      active.erase(it);
    }
    // A guard for a scheduler that can run nothing although work is queued.
    no_progress =
        (engine.steps() == steps_before && finished.empty() && !active.empty()) ? no_progress + 1 : 0;
    if (no_progress > 1000) {
      engine.FailAll(
          absl::InternalError("the engine scheduled nothing for 1000 iterations with work queued"));
    }
    results.ShowProgress();
  }
  info->engine_steps = engine.steps();
  info->preemptions = engine.preemptions();
  return outcome;
}

}  // namespace shardlm
