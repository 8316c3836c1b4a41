// The engine's constrained decoding (docs/structured_outputs.md): each
// constrained sequence's mask for its next token, computed when its step is
// planned or, when that token is still being sampled by the step in flight,
// sent after it (SendFollowingMasks); and its matcher advanced past each
// token sampled.
#include <algorithm>
#include <chrono>
#include <thread>

#include "coordinator/engine/engine.h"
#include "coordinator/engine/service_metrics.h"

namespace shardlm {

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
    if (!ok[i]) End(*seqs[i], FinishReason::kNone, done[i]);
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
    if (seq->end_requested) continue;
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
    End(seq, FinishReason::kNone, st);
    return;
  }
  if (seq.matcher->stopped()) End(seq, FinishReason::kStop, absl::OkStatus());
}

}  // namespace shardlm
