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

#include "model/step.h"

namespace shardlm {

// logits: f32[vocab] of one row.
RowResult ProcessRow(const float* logits, int64_t vocab, const SampleRow& row);

// Mixes a request seed and a token index into the seed of one draw.
uint64_t DrawSeed(uint64_t request_seed, uint64_t token_index);

}  // namespace shardlm
