#include "step/draw_seed.h"

namespace shardlm {

uint64_t DrawSeed(uint64_t request_seed, uint64_t token_index) {
  // splitmix64 of the pair: well mixed, cheap, stable across platforms.
  uint64_t z = request_seed * 0x9E3779B97F4A7C15ull + token_index + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace shardlm
