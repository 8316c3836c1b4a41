// Prompt lookup (docs/speculative_decoding.md): proposes the tokens that
// followed the most recent earlier occurrence of the sequence's last n
// tokens, the longest n in [min_n, max_n] that occurred before.
//
//   tokens = {5, 6, 7, 9, 5, 6}          // "5 6" occurred at 0, followed by 7 9 5 6
//   ProposeNgram(tokens, 3, {}) == {7, 9, 5}
#pragma once

#include <cstdint>
#include <vector>

namespace shardlm {

struct NgramOptions {
  int32_t min_n = 1;
  int32_t max_n = 4;
};

// Up to `k` proposed tokens after `tokens` (prompt and output so far); none
// when no n-gram of the suffix occurred earlier.
std::vector<int32_t> ProposeNgram(const std::vector<int32_t>& tokens, int32_t k, NgramOptions options);

}  // namespace shardlm
