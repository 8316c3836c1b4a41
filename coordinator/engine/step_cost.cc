#include "coordinator/engine/step_cost.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace shardlm {

double StepCost::ChunkSeconds(int64_t start, int64_t tokens) const {
  // Token i (from 0) attends to start + i + 1 keys.
  const double t = static_cast<double>(tokens);
  return Seconds(t, t * static_cast<double>(start) + t * (t + 1) / 2);
}

int64_t StepCost::ChunkTokensWithin(int64_t start, double seconds) const {
  if (seconds <= 0) return 0;
  // The largest t with per_key / 2 * t^2 + (per_token + per_key * (start + 1/2)) * t <= seconds.
  const double a = per_key / 2;
  const double b = per_token + per_key * (static_cast<double>(start) + 0.5);
  if (a <= 0 && b <= 0) return std::numeric_limits<int32_t>::max();
  // The positive root, in the form that stays exact when a is small (or 0).
  const double t = 2 * seconds / (b + std::sqrt(b * b + 4 * a * seconds));
  constexpr double kMost = std::numeric_limits<int32_t>::max();
  return static_cast<int64_t>(std::min(std::floor(t), kMost));
}

void StepCostModel::Observe(int64_t tokens, int64_t keys, double seconds) {
  if (tokens <= 0 || keys < 0 || !(seconds >= 0) || !std::isfinite(seconds)) return;
  window_.push_back({static_cast<double>(tokens), static_cast<double>(keys), seconds});
  if (window_.size() > kWindow) window_.pop_front();
  if (window_.size() >= kMinSteps) Fit();
}

template <typename X, typename Y>
double StepCostModel::Sum(X x, Y y) const {
  double sum = 0, w = 1;
  for (auto it = window_.rbegin(); it != window_.rend(); ++it, w *= kDecay) sum += w * x(*it) * y(*it);
  return sum;
}

void StepCostModel::Fit() {
  auto tokens = [](const Sample& s) { return s.tokens; };
  auto keys = [](const Sample& s) { return s.keys; };
  auto seconds = [](const Sample& s) { return s.seconds; };
  // The normal equations of seconds ~ a * tokens + b * keys.
  const double tt = Sum(tokens, tokens), tk = Sum(tokens, keys), kk = Sum(keys, keys);
  const double ts = Sum(tokens, seconds), ks = Sum(keys, seconds);
  const double kk_ridged = kk * (1 + kRidge);
  const double det = tt * kk_ridged - tk * tk;
  double a = -1, b = -1;
  if (det > 0) {
    a = (ts * kk_ridged - tk * ks) / det;
    b = (tt * ks - tk * ts) / det;
  }
  if (a >= 0 && b >= 0) {
    cost_ = StepCost{a, b};
    return;
  }
  // Tokens alone (tt > 0: every step has a token), even where keys alone
  // would fit better: steps deep in a prompt fitted by keys alone make the
  // next prompt's first, shallow chunk look almost free. (Choosing the better
  // term let a step after the warm-up in operations_test.py's
  // deadline_mid_prefill run past a second, 4 runs in 20.)
  cost_ = StepCost{std::max(ts / tt, 0.0), 0};
}

}  // namespace shardlm
