#include "coordinator/engine/ngram_proposer.h"

#include <algorithm>

namespace shardlm {
namespace {

// The start of the most recent occurrence of tokens' last n tokens that ends
// before them, or -1.
int64_t LastOccurrence(const std::vector<int32_t>& tokens, int64_t n) {
  const int64_t len = static_cast<int64_t>(tokens.size());
  const int32_t* suffix = tokens.data() + len - n;
  for (int64_t start = len - n - 1; start >= 0; --start) {
    if (std::equal(suffix, suffix + n, tokens.data() + start)) return start;
  }
  return -1;
}

}  // namespace

std::vector<int32_t> ProposeNgram(const std::vector<int32_t>& tokens, int32_t k, NgramOptions options) {
  const int64_t len = static_cast<int64_t>(tokens.size());
  if (k <= 0) return {};
  for (int64_t n = std::min<int64_t>(options.max_n, len - 1); n >= std::max(1, options.min_n); --n) {
    const int64_t start = LastOccurrence(tokens, n);
    if (start < 0) continue;
    const int64_t from = start + n, to = std::min<int64_t>(len, from + k);
    return std::vector<int32_t>(tokens.begin() + from, tokens.begin() + to);
  }
  return {};
}

}  // namespace shardlm
