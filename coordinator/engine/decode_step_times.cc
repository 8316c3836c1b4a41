#include "coordinator/engine/decode_step_times.h"

#include <algorithm>
#include <iterator>

namespace shardlm {

void DecodeStepTimes::Observe(int32_t rows, double ms) {
  if (rows <= 0 || !(ms > 0)) return;
  auto [it, fresh] = ms_.emplace(rows, ms);
  if (!fresh) it->second = (1 - kWeight) * it->second + kWeight * ms;
}

std::optional<double> DecodeStepTimes::Estimate(int32_t rows) const {
  if (ms_.empty()) return std::nullopt;
  auto above = ms_.lower_bound(rows);
  if (above != ms_.end() && above->first == rows) return above->second;
  if (ms_.size() == 1) {
    const auto& [r, ms] = *ms_.begin();
    return std::max(0.0, ms * (1 + kGuessedRowShare * (rows - r)));
  }
  // Two measured counts: the nearest on either side, else the two nearest on one.
  auto lo = above == ms_.begin() ? ms_.begin() : std::prev(above);
  auto hi = above == ms_.end() ? std::prev(ms_.end()) : above;
  if (lo == hi) {
    if (hi == ms_.begin()) {
      hi = std::next(lo);
    } else {
      lo = std::prev(hi);
    }
  }
  const double slope = (hi->second - lo->second) / (hi->first - lo->first);
  return std::max(0.0, lo->second + slope * (rows - lo->first));
}

}  // namespace shardlm
