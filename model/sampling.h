// Turns one row of logits into what the client asked for: the sampled token,
// its logprob, the target's logprob (scoring) and the top-n alternatives.
//
// Order of operations, as in vLLM: a constraint's mask, logit bias, penalties
// (repetition, presence, frequency) -> temperature -> top-k -> top-p -> min-p -> draw. Temperature 0
// is greedy. Logprobs are always of the unmodified model distribution. Draws
// are seeded per (request seed, token index), so a request's output does not
// depend on what else was in the batch.
#pragma once

#include <cstdint>

#include "step/draw_seed.h"
#include "step/step.h"

namespace shardlm {

// logits: f32[vocab] of one row.
RowResult ProcessRow(const float* logits, int64_t vocab, const SampleRow& row);

}  // namespace shardlm
