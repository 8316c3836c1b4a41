#include "coordinator/engine/draft_proposer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "common/logging.h"

namespace shardlm {
namespace {

// The draft proposes its argmax: a point mass, which the verification's
// rule turns into Leviathan et al.'s (docs/speculative_decoding.md).
SamplingParams Greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

}  // namespace

DraftModelProposer::DraftModelProposer(StepExecutor* executor, int32_t num_blocks, int32_t block_size,
                                       std::vector<int64_t> eos_token_ids, Options options)
    : executor_(executor),
      num_blocks_(num_blocks),
      block_size_(block_size),
      eos_(std::move(eos_token_ids)),
      options_(options) {
  free_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

bool DraftModelProposer::IsEos(int32_t token) const {
  return std::find(eos_.begin(), eos_.end(), token) != eos_.end();
}

void DraftModelProposer::Truncate(Cache& cache, int32_t tokens) {
  if (static_cast<int32_t>(cache.fed.size()) > tokens) cache.fed.resize(tokens);
  const size_t keep = static_cast<size_t>((tokens + block_size_ - 1) / block_size_);
  while (cache.blocks.size() > keep) {
    free_.push_back(cache.blocks.back());
    cache.blocks.pop_back();
  }
}

bool DraftModelProposer::Reserve(Cache& cache, int32_t tokens) {
  const int32_t need = (tokens + block_size_ - 1) / block_size_ - static_cast<int32_t>(cache.blocks.size());
  if (need <= 0) return true;
  while (static_cast<int32_t>(free_.size()) < need) {
    // The least recently used cache that no ask of this call holds.
    auto victim = caches_.end();
    for (auto it = caches_.begin(); it != caches_.end(); ++it) {
      if (it->second.used == calls_ || it->second.blocks.empty()) continue;
      if (victim == caches_.end() || it->second.used < victim->second.used) victim = it;
    }
    if (victim == caches_.end()) return false;
    free_.insert(free_.end(), victim->second.blocks.begin(), victim->second.blocks.end());
    caches_.erase(victim);
    ++stats_.evictions;
  }
  for (int32_t i = 0; i < need; ++i) {
    cache.blocks.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void DraftModelProposer::Forget(int64_t id) {
  auto it = caches_.find(id);
  if (it == caches_.end()) return;
  free_.insert(free_.end(), it->second.blocks.begin(), it->second.blocks.end());
  caches_.erase(it);
}

void DraftModelProposer::DropAll() {
  for (auto& [id, cache] : caches_) free_.insert(free_.end(), cache.blocks.begin(), cache.blocks.end());
  caches_.clear();
}

bool DraftModelProposer::MaskRow(size_t i, Walks& walks, SampleRow& row) {
  Matcher* walk = walks.matchers[i].get();
  if (walk == nullptr) return true;
  if (walk->stopped() || !walk->ComputeMask(walks.masks[i]).ok()) return false;
  row.allowed = walks.masks[i].data();
  row.allowed_words = static_cast<int64_t>(walks.masks[i].size());
  return true;
}

StepInput DraftModelProposer::FirstPass(const std::vector<DraftAsk>& asks, Walks& walks,
                                        std::vector<size_t>& going) {
  static const SamplingParams kGreedy = Greedy();
  static const std::vector<int32_t> kNone;
  StepInput step;
  int32_t budget = options_.max_catch_up;
  for (size_t i = 0; i < asks.size(); ++i) {
    const std::vector<int32_t>& tokens = *asks[i].tokens;
    const int32_t n = static_cast<int32_t>(tokens.size());
    Cache& cache = caches_[asks[i].id];
    int32_t keep = 0;  // shared with the cache; the last token is always fed (its logits are wanted)
    const int32_t shared_limit = std::min(static_cast<int32_t>(cache.fed.size()), n - 1);
    while (keep < shared_limit && cache.fed[keep] == tokens[keep]) ++keep;
    Truncate(cache, keep);
    int32_t k = asks[i].k;
    if (options_.max_position > 0)
      k = static_cast<int32_t>(std::min<int64_t>(k, options_.max_position - n + 1));
    const int32_t to = std::min(n, keep + budget);
    if (to == keep) continue;
    const bool proposes = to == n && k > 0;
    // The passes write positions [keep, n + k - 1): the sequence's tokens, then proposals 1..k-1.
    if (!Reserve(cache, proposes ? n + k - 1 : to)) continue;
    budget -= to - keep;
    stats_.fed_tokens += to - keep;
    const int32_t seq = static_cast<int32_t>(step.block_tables.size());
    step.block_tables.push_back(cache.blocks);
    for (int32_t p = keep; p < to; ++p) {
      step.token_ids.push_back(tokens[p]);
      step.positions.push_back(p);
      step.seq_of_token.push_back(seq);
      cache.fed.push_back(tokens[p]);
    }
    if (!proposes) continue;
    SampleRow row;
    row.row = static_cast<int32_t>(step.token_ids.size()) - 1;
    row.seq = seq;
    row.sample = true;
    row.params = &kGreedy;
    row.prompt = &kNone;
    row.generated = &kNone;
    if (asks[i].constraint != nullptr) walks.matchers[i] = asks[i].constraint->Clone();
    if (asks[i].constraint != nullptr && (!walks.matchers[i] || !MaskRow(i, walks, row))) continue;
    step.rows.push_back(row);
    going.push_back(i);
  }
  return step;
}

StepInput DraftModelProposer::NextPass(const StepInput& step, const std::vector<RowResult>& rows,
                                       const std::vector<DraftAsk>& asks, Walks& walks,
                                       std::vector<size_t>& going, std::vector<std::vector<int32_t>>& out) {
  StepInput next;
  std::vector<size_t> still;
  for (size_t r = 0; r < going.size(); ++r) {
    const size_t i = going[r];
    const int32_t token = rows[r].token;
    // Not under a constraint: its mask may force a token the model's own
    // (unmasked) probability calls unlikely.
    if (options_.min_probability > 0 && !walks.matchers[i] &&
        std::exp(rows[r].logprob) < options_.min_probability) {
      ++stats_.unsure_stops;
      continue;
    }
    out[i].push_back(token);
    if (static_cast<int32_t>(out[i].size()) >= asks[i].k || IsEos(token)) continue;
    SampleRow row = step.rows[r];
    if (walks.matchers[i] && (!walks.matchers[i]->Consume(token).ok() || !MaskRow(i, walks, row))) continue;
    Cache& cache = caches_[asks[i].id];
    const int32_t seq = static_cast<int32_t>(next.block_tables.size());
    next.block_tables.push_back(cache.blocks);
    next.token_ids.push_back(token);
    next.positions.push_back(static_cast<int32_t>(cache.fed.size()));
    next.seq_of_token.push_back(seq);
    cache.fed.push_back(token);
    row.row = seq;
    row.seq = seq;
    next.rows.push_back(row);
    still.push_back(i);
  }
  going = std::move(still);
  return next;
}

std::vector<std::vector<int32_t>> DraftModelProposer::Propose(const std::vector<DraftAsk>& asks) {
  ++calls_;
  std::vector<std::vector<int32_t>> out(asks.size());
  for (const DraftAsk& a : asks) caches_[a.id].used = calls_;
  std::vector<size_t> going;  // the asks whose rows are in the pass, row by row
  Walks walks;
  walks.matchers.resize(asks.size());
  walks.masks.resize(asks.size());
  StepInput step = FirstPass(asks, walks, going);
  // Then one token per proposing sequence and pass: its own last proposal.
  while (!step.token_ids.empty()) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<RowResult>> rows = executor_->Execute(step);
    ++stats_.passes;
    if (!rows.ok() || rows->size() != going.size()) {
      LOG(ERROR) << "draft model pass failed; its proposals are dropped: "
                 << (rows.ok() ? "rows missing" : rows.status().ToString());
      ++stats_.failed_passes;
      DropAll();
      return std::vector<std::vector<int32_t>>(asks.size());
    }
    if (step.token_ids.size() == step.rows.size()) {
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      stats_.pass_ms = stats_.pass_ms > 0 ? 0.8 * stats_.pass_ms + 0.2 * ms : ms;
    }
    step = NextPass(step, *rows, asks, walks, going, out);
  }
  return out;
}

}  // namespace shardlm
