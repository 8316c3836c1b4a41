// A step as the Engine planned it: the StepInput every rank runs, and what
// the engine needs to apply its rows (whose each row is, the tokens each
// sequence took, the copy-on-write sources to release). Built by
// Engine::PlanStep, read by the executor through `input`, consumed by
// Engine::ApplyStep.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "step/step.h"

namespace shardlm {

struct Sequence;

// A row of a planned step: the sequence it belongs to and, for scoring rows,
// the prompt index scored.
struct RowOwner {
  Sequence* seq;
  int32_t scored_index;  // -1 for a sampling row; kNextTopRow for the next token's top-n
  static constexpr int32_t kNextTopRow = -2;
  // A row that verifies a proposal (docs/speculative_decoding.md): its
  // Speculation in the plan, and which of its rows (0 samples as a decode
  // does; row i > 0 stands on proposal i - 1, scored_index kProposalRow).
  int32_t speculation = -1;
  int32_t speculation_row = 0;
  static constexpr int32_t kProposalRow = -3;
};

// A sequence whose step verifies proposed tokens: where it stood, what it
// proposed, and what its rows have accepted so far as they are applied.
struct Speculation {
  Sequence* seq;
  int32_t computed_before = 0;    // num_computed when planned: the position of its last token
  std::vector<int32_t> proposed;  // the proposals in the step (the scheduler may have cut some)
  int32_t accepted = 0;
  int32_t last_drawn = -1;  // the token the last row applied drew
  bool rejected = false;    // a row drew other than its proposal: the rest are not applied
  bool by_lookup = false;   // proposed by prompt lookup (else by the draft model)
};

struct PlannedStep {
  StepInput input;
  std::vector<Sequence*> in_step;
  std::vector<int32_t> takes;  // tokens of each in_step sequence
  std::vector<RowOwner> owners;
  std::vector<std::pair<int32_t, int32_t>> copies;  // copy-on-write sources released once applied
  // Rows whose constraint mask follows the step (the sequence's token from
  // the step before is not known yet): (index into input.rows, sequence).
  std::vector<std::pair<int32_t, Sequence*>> masks_follow;
  std::vector<Speculation> speculating;
  // The penalty history of each proposal row: the output, then the proposals before it.
  std::deque<std::vector<int32_t>> proposal_histories;
  std::chrono::steady_clock::time_point started;   // sent to the executor (StartStep)
  std::chrono::steady_clock::time_point finished;  // its rows back (WaitStep)
};

}  // namespace shardlm
