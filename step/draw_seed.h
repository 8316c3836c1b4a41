// The seed of one sampling draw. The coordinator gives each sampled row the
// seed of its (request seed, token index) pair; rank 0 draws from it. So a
// seeded request gives the same output whatever else shares its batch, and
// whether or not it was preempted and recomputed.
//
//   row.draw_seed = DrawSeed(request.sampling.seed, tokens_generated_so_far);
#pragma once

#include <cstdint>

namespace shardlm {

// Mixes a request seed and a token index into the seed of one draw.
uint64_t DrawSeed(uint64_t request_seed, uint64_t token_index);

}  // namespace shardlm
