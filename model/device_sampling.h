// ProcessRow (model/sampling.h) for every sampled row of a step at once, with
// ATen operators on the device the logits are on: the vocabulary never
// leaves the device, only the tokens, log-probabilities and top-n
// alternatives come back.
//
// Same definitions as ProcessRow: penalties, then temperature, top-k, top-p,
// min-p and a draw seeded by the row's draw_seed with the same uniform
// number, over the candidates in the same order (vocabulary order, or most
// likely first under top-p). Results equal ProcessRow's up to the rounding of
// the device's sums, which can move a draw that lands within rounding of a
// boundary between two tokens.
//
//   std::vector<RowResult> out = ProcessRowsOnDevice(logits, step.rows);  // f32[rows, vocab]
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "step/step.h"

namespace shardlm {

std::vector<RowResult> ProcessRowsOnDevice(const at::Tensor& logits, const std::vector<SampleRow>& rows);

}  // namespace shardlm
