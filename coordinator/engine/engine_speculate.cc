// Speculative decoding in the engine (docs/speculative_decoding.md): the
// proposals made before the scheduler runs, a speculating sequence's rows,
// its rows applied while they accept, and the rollback to what it kept.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>

#include "coordinator/engine/engine.h"
#include "coordinator/engine/ngram_proposer.h"
#include "coordinator/engine/service_metrics.h"
#include "step/draw_seed.h"

namespace shardlm {
namespace {

// A sequence whose proposals are seldom accepted proposes one token once in
// this many steps, so that one which starts repeating its input is noticed.
constexpr int32_t kProbeSteps = 8;

// What a step costs with `rows` rows, and a draft pass (any unit).
struct SpeculationCosts {
  std::function<double(int32_t)> step;
  double pass = 0;
};

// Tokens `seq` proposes now: the k in [0, most] that makes the most tokens
// per unit of time, where each proposal is accepted with the proposer's
// recent per-token acceptance a for the sequence, so that a step of k proposals yields
// 1 + a + ... + a^k tokens (Leviathan et al.'s expectation), and costs k
// draft passes (none for prompt lookup) plus a step of `rows` + k rows.
// k = 0 is plain decoding (one token for a step of `rows` rows); then a
// one-token probe once in kProbeSteps steps, so that a sequence whose
// proposals stopped paying (a chat answer that starts quoting its input,
// say) is noticed (the probe's rate is plain decoding's).
Engine::ProposalChoice SpeculationLength(const Sequence& seq, const ProposalRate& acceptance, int32_t most,
                                         int32_t rows, const SpeculationCosts& cost) {
  const double a = acceptance.rate();
  Engine::ProposalChoice best{0, 1.0 / cost.step(rows)};
  double expected = 1.0, run = 1.0;
  for (int32_t k = 1; k <= most; ++k) {
    run *= a;
    expected += run;
    const double rate = expected / (k * cost.pass + cost.step(rows + k));
    if (rate > best.rate) best = {k, rate};
  }
  if (best.k == 0 && (seq.steps_unproposed + 1) % kProbeSteps == 0) best.k = 1;
  return best;
}

// Prompt lookup's proposals that lost to the draft's (seq.shadow_lookup)
// scored against what the step drew: the tokens it kept, then the one its
// last applied row drew. A match past those is neither hit nor miss.
void ScoreShadowLookup(Sequence& seq, const Speculation& sp) {
  std::vector<int32_t> drawn(sp.proposed.begin(), sp.proposed.begin() + sp.accepted);
  if (sp.last_drawn >= 0) drawn.push_back(sp.last_drawn);
  const std::vector<int32_t>& shadow = seq.shadow_lookup;
  const auto known = static_cast<int32_t>(std::min(shadow.size(), drawn.size()));
  int32_t hits = 0;
  while (hits < known && shadow[hits] == drawn[hits]) ++hits;
  if (!shadow.empty()) seq.lookup_rate.Add(hits, hits < known);
  seq.shadow_lookup.clear();
}

// Whether the request lets `seq` speculate at all.
bool Speculates(const Sequence& seq) { return seq.request.speculate && !seq.end_requested; }

}  // namespace

bool Engine::SpeculationOn() const {
  const Options::Speculation& spec = options_.speculation;
  // Beyond the crossover a batch's proposal rows cost more than they save.
  const bool proposer = spec.method == Options::Speculation::Method::kNgram ||
                        (spec.method == Options::Speculation::Method::kDraft && spec.draft != nullptr);
  return proposer && spec.tokens > 0 && static_cast<int32_t>(scheduler_.running().size()) <= spec.max_batch;
}

void Engine::Propose() {
  if (!SpeculationOn()) return;
  const Options::Speculation& spec = options_.speculation;
  const bool draft = spec.method == Options::Speculation::Method::kDraft;
  const int32_t running = static_cast<int32_t>(scheduler_.running().size());
  // The proposals share the rows max_rows leaves, best acceptance first (the
  // draft's with a draft model, else lookup's).
  int32_t rows_left = spec.max_rows - running;
  std::vector<Sequence*> order;
  for (SchedSeq* s : scheduler_.running()) order.push_back(static_cast<Sequence*>(s));
  const auto rate = [draft](const Sequence* s) { return (draft ? s->draft_rate : s->lookup_rate).rate(); };
  std::stable_sort(order.begin(), order.end(),
                   [&](const Sequence* a, const Sequence* b) { return rate(a) > rate(b); });
  // Who proposes, and how many tokens at most.
  std::vector<Sequence*> proposing;
  std::vector<DraftAsk> asks;
  std::vector<std::vector<int32_t>> drafts;  // each one's proposals
  std::vector<bool> by_lookup;
  for (Sequence* s : order) {
    Sequence& seq = *s;
    const bool decoding = seq.flight.steps == 0 && seq.num_computed + 1 == seq.length();
    if (!decoding || !Speculates(seq)) continue;
    seq.shadow_lookup.clear();
    // Tokens it may still take after the one this step draws anyway.
    const int32_t left = seq.request.max_new_tokens - static_cast<int32_t>(seq.result.tokens.size()) - 1;
    if (left <= 0) continue;
    const int32_t most = std::min(left, rows_left);
    // Prompt lookup where it matches and pays more than the draft would.
    // With a draft, lookup always looks (its shadow costs no rows), so that
    // its acceptance is scored even while its own length would be 0.
    std::vector<int32_t> lookup;
    const ProposalChoice by_draft = draft ? ProposalLength(seq, false) : ProposalChoice{};
    if (!draft || spec.lookup_min_n > 0) {
      const ProposalChoice looking = ProposalLength(seq, true);
      lookup = LookUp(seq, draft ? most : std::min(looking.k, most));
      if (draft && !lookup.empty() && (looking.k == 0 || (by_draft.k > 0 && by_draft.rate > looking.rate))) {
        seq.shadow_lookup = std::move(lookup);  // the draft's step will tell how it would have done
        lookup.clear();
      } else if (static_cast<int32_t>(lookup.size()) > looking.k) {
        lookup.resize(static_cast<size_t>(std::max(looking.k, 0)));
      }
    }
    const bool looked_up = !lookup.empty();
    const int32_t k = looked_up ? static_cast<int32_t>(lookup.size()) : std::min(by_draft.k, most);
    if (k <= 0) {
      ++seq.steps_unproposed;
      continue;
    }
    rows_left -= k;
    proposing.push_back(&seq);
    by_lookup.push_back(looked_up);
    if (!looked_up) asks.push_back({seq.id, &seq.tokens, k, seq.matcher.get()});
    drafts.push_back(std::move(lookup));
  }
  if (proposing.empty()) return;
  if (!asks.empty()) {
    std::vector<std::vector<int32_t>> drafted = spec.draft->Propose(asks);
    for (size_t i = 0, a = 0; i < proposing.size(); ++i) {
      if (!by_lookup[i]) drafts[i] = std::move(drafted[a++]);
    }
  }
  int32_t reserved = 0;  // free blocks the proposals so far would take
  for (size_t i = 0; i < proposing.size(); ++i) {
    Sequence& seq = *proposing[i];
    std::vector<int32_t>& draft = drafts[i];
    if (seq.matcher) ConstrainProposals(seq, draft);
    const int32_t short_blocks =
        draft.empty() ? 0 : kv_.BlocksShort(seq, seq.num_computed + 1 + static_cast<int32_t>(draft.size()));
    if (draft.empty() || short_blocks > kv_.FreeBlocks() - reserved) {  // never worth a preemption
      ++seq.steps_unproposed;
      seq.draft_masks.clear();
      seq.shadow_lookup.clear();
      continue;
    }
    reserved += short_blocks;
    seq.draft = std::move(draft);
    seq.draft_by_lookup = by_lookup[i];
    seq.steps_unproposed = 0;
  }
}

std::vector<int32_t> Engine::LookUp(const Sequence& seq, int32_t k) const {
  if (k <= 0) return {};
  NgramOptions lookup;
  if (options_.speculation.method == Options::Speculation::Method::kDraft) {
    lookup.min_n = options_.speculation.lookup_min_n;
    lookup.max_n = std::max(lookup.max_n, lookup.min_n);
  }
  return ProposeNgram(seq.tokens, k, lookup);
}

Engine::ProposalChoice Engine::ProposalLength(const Sequence& seq, bool lookup) const {
  const Options::Speculation& spec = options_.speculation;
  // As measured: the steps of decodes by their rows, and the draft's passes.
  // Until they are, a tenth of a step a row and a third a pass (the options
  // set them for tests).
  const int32_t rows = std::max<int32_t>(1, static_cast<int32_t>(scheduler_.running().size()));
  SpeculationCosts cost;
  const bool measured = spec.row_cost <= 0 && decode_times_.Estimate(rows).has_value();
  if (measured) {
    cost.step = [this](int32_t r) { return decode_times_.Estimate(r).value_or(1.0); };
  } else {  // in steps of `rows` rows
    const double row = spec.row_cost > 0 ? spec.row_cost : 0.1;
    cost.step = [row, rows](int32_t r) { return 1.0 + row * (r - rows); };
  }
  if (!lookup) {
    const double pass_ms = spec.draft->stats().pass_ms;
    cost.pass = spec.draft_cost > 0       ? spec.draft_cost * cost.step(rows)
                : measured && pass_ms > 0 ? pass_ms
                                          : cost.step(rows) / 3;
  }
  return SpeculationLength(seq, lookup ? seq.lookup_rate : seq.draft_rate, spec.tokens, rows, cost);
}

bool Engine::MayPropose(const Sequence& seq) const {
  if (!SpeculationOn() || !Speculates(seq)) return false;
  const bool draft = options_.speculation.method == Options::Speculation::Method::kDraft;
  if (!draft) return ProposalLength(seq, true).k > 0;
  // With a draft, lookup proposes only where it matches (on the tokens known
  // now: the one the running step draws may make or break a match).
  const bool lookup =
      options_.speculation.lookup_min_n > 0 && ProposalLength(seq, true).k > 0 && !LookUp(seq, 1).empty();
  return lookup || ProposalLength(seq, false).k > 0;
}

void Engine::ConstrainProposals(Sequence& seq, std::vector<int32_t>& draft) {
  seq.draft_masks.clear();
  if (draft.empty()) return;
  std::unique_ptr<Matcher> walk = seq.matcher->Clone();
  if (!walk) {
    draft.clear();
    return;
  }
  // Row i's mask is the constraint's after proposals 1..i; a proposal it
  // does not allow could never be drawn there, so the proposals end before it.
  for (size_t i = 0; i <= draft.size(); ++i) {
    std::vector<uint32_t>& mask = seq.draft_masks.emplace_back();
    const auto start = std::chrono::steady_clock::now();
    const absl::Status computed = walk->ComputeMask(mask);
    if (options_.metrics) {
      options_.metrics->constraint_mask->Observe(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    if (!computed.ok()) {  // the plain path's mask reports the error
      draft.clear();
      seq.draft_masks.clear();
      return;
    }
    if (i == draft.size()) break;
    const int32_t d = draft[i];
    if (!MaskAllows(mask.data(), static_cast<int64_t>(mask.size()), d) || !walk->Consume(d).ok()) {
      draft.resize(i);
      break;
    }
  }
  if (draft.empty()) seq.draft_masks.clear();
}

void Engine::DropUnscheduledProposals() {
  for (auto& [id, seq] : seqs_) {
    if (seq->flight.steps == 0) {
      seq->draft.clear();
      seq->draft_masks.clear();
      seq->shadow_lookup.clear();
    }
  }
}

void Engine::AddProposalRows(PlannedStep& plan, Sequence& seq, int32_t first_row, int32_t seq_index) {
  StepInput& step = plan.input;
  const int32_t index = static_cast<int32_t>(plan.speculating.size());
  Speculation sp;
  sp.seq = &seq;
  sp.computed_before = seq.num_computed;
  sp.proposed = seq.draft;
  sp.by_lookup = seq.draft_by_lookup;
  const int32_t drawn = static_cast<int32_t>(seq.result.tokens.size());
  for (int32_t i = 0; i <= static_cast<int32_t>(sp.proposed.size()); ++i) {
    SampleRow row;
    row.row = first_row + i;
    row.seq = seq_index;
    row.sample = true;
    row.params = &seq.request.sampling;
    row.prompt = &seq.context;
    if (i == 0) {
      row.generated = &seq.result.tokens;
    } else {
      // Its penalties see the proposals before it as output.
      std::vector<int32_t>& history = plan.proposal_histories.emplace_back(seq.result.tokens);
      history.insert(history.end(), sp.proposed.begin(), sp.proposed.begin() + i);
      row.generated = &history;
    }
    // The seed of the output index it would have had without speculation.
    row.draw_seed = DrawSeed(seq.request.sampling.seed, drawn + i);
    if (seq.matcher) {  // the constraint's mask after the proposals before it
      row.allowed = seq.draft_masks[i].data();
      row.allowed_words = static_cast<int64_t>(seq.draft_masks[i].size());
    }
    if (i == 0) seq.flight.pending_row = static_cast<int32_t>(step.rows.size());
    step.rows.push_back(row);
    RowOwner owner{&seq, i == 0 ? -1 : RowOwner::kProposalRow};
    owner.speculation = index;
    owner.speculation_row = i;
    plan.owners.push_back(owner);
  }
  plan.speculating.push_back(std::move(sp));
}

void Engine::ApplyRows(PlannedStep& plan, const std::vector<RowResult>& results) {
  for (size_t i = 0; i < plan.owners.size(); ++i) {
    const RowOwner& owner = plan.owners[i];
    if (owner.speculation < 0) {
      ApplyRow(owner, results[i]);
      continue;
    }
    Speculation& sp = plan.speculating[owner.speculation];
    Sequence* seq = owner.seq;
    if (owner.speculation_row > 0) {
      if (sp.rejected || seq->end_requested) continue;
      if (sp.last_drawn != sp.proposed[owner.speculation_row - 1]) {
        sp.rejected = true;
        continue;
      }
      // The row before drew the proposal this row stands on: its K/V, which
      // this step wrote, is the sequence's now.
      ++sp.accepted;
      seq->num_computed = sp.computed_before + 1 + owner.speculation_row;
    }
    ApplyRow({seq, -1}, results[i]);
    sp.last_drawn = results[i].token;
  }
}

void Engine::RollBackProposals(PlannedStep& plan) {
  // Until its rows accept them, the proposals' K/V is not the sequence's.
  for (Speculation& sp : plan.speculating) sp.seq->num_computed = sp.computed_before + 1;
}

void Engine::SettleProposals(PlannedStep& plan, bool ran) {
  for (Speculation& sp : plan.speculating) {
    Sequence& seq = *sp.seq;
    seq.draft.clear();
    seq.draft_masks.clear();
    kv_.Shrink(seq);
    // A failed step wrote nothing anyone may rely on: published nothing, counted nothing.
    if (!ran) {
      seq.shadow_lookup.clear();
      continue;
    }
    if (!seq.end_requested || seq.end_status.ok()) kv_.Publish(seq);  // blocks its accepted tokens filled
    // Per token: the accepted proposals succeeded, the first rejected one failed.
    (sp.by_lookup ? seq.lookup_rate : seq.draft_rate)
        .Add(sp.accepted, sp.accepted < static_cast<int32_t>(sp.proposed.size()));
    if (!sp.by_lookup) ScoreShadowLookup(seq, sp);
    seq.result.proposed_tokens += static_cast<int32_t>(sp.proposed.size());
    seq.result.accepted_tokens += sp.accepted;
    proposed_tokens_ += static_cast<int64_t>(sp.proposed.size());
    accepted_tokens_ += sp.accepted;
    if (sp.by_lookup) {
      lookup_proposed_tokens_ += static_cast<int64_t>(sp.proposed.size());
      lookup_accepted_tokens_ += sp.accepted;
    }
    if (options_.metrics) {
      options_.metrics->spec_drafts->Add();
      options_.metrics->spec_draft_tokens->Add(static_cast<double>(sp.proposed.size()));
      options_.metrics->spec_accepted_tokens->Add(static_cast<double>(sp.accepted));
      if (sp.by_lookup) {
        options_.metrics->spec_lookup_tokens->Add(static_cast<double>(sp.proposed.size()));
        options_.metrics->spec_lookup_accepted_tokens->Add(static_cast<double>(sp.accepted));
      }
    }
  }
}

}  // namespace shardlm
