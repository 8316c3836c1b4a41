// A step as the Engine planned it: the StepInput every rank runs, and what
// the engine needs to apply its rows (whose each row is, the tokens each
// sequence took, the copy-on-write sources to release). Built by
// Engine::PlanStep, read by the executor through `input`, consumed by
// Engine::ApplyStep.
#pragma once

#include <chrono>
#include <cstdint>
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
  std::chrono::steady_clock::time_point started;   // sent to the executor (StartStep)
  std::chrono::steady_clock::time_point finished;  // its rows back (WaitStep)
};

}  // namespace shardlm
