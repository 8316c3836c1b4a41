// What an engine step costs, learnt from the steps before it (the engine's
// --target-step-ms budget, docs/scheduler.md).
//
// A step's time is modelled as per_token * tokens + per_key * keys, where
// `keys` counts, over the step's tokens, the cached keys each attends to (its
// position + 1). A cost per token alone is not enough: on a CPU a prompt
// token of SmolLM2 at position 2000 costs about five times one at position 0,
// so the late chunks of long prompts ran at twice the target or more, and a
// cancelled request held its blocks that much longer. There is no fixed term
// on purpose: a step's fixed cost, folded into its tokens, makes the model
// overestimate longer steps than those it saw (the safe side), where a fitted
// intercept could be too small and let the next, longer step overrun (seen:
// short steps deep in a prompt fitted as all fixed cost, then a 523-token
// chunk of a new prompt took 1 s against a 250 ms target).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>

namespace shardlm {

struct StepCost {
  double per_token = 0;  // seconds per token computed
  double per_key = 0;    // seconds per cached key a token attends to
  double Seconds(double tokens, double keys) const { return per_token * tokens + per_key * keys; }
  // What `tokens` tokens of one sequence from position `start` on cost.
  double ChunkSeconds(int64_t start, int64_t tokens) const;
  // The most tokens of one sequence from position `start` on that cost at
  // most `seconds` (0 when seconds <= 0; INT32_MAX when nothing costs).
  int64_t ChunkTokensWithin(int64_t start, double seconds) const;
};

// Weighted least squares over the last kWindow steps, the newer weighing
// more, with both coefficients >= 0 (when either comes out negative, tokens
// alone). A small ridge on per_key settles what the steps cannot tell apart
// (all at one depth: tokens and keys in proportion) towards per_token. Both
// lean the same way: towards overestimating shallower work.
class StepCostModel {
 public:
  static constexpr int kWindow = 32;
  static constexpr double kDecay = 0.9;  // a step's weight, per newer step
  static constexpr int kMinSteps = 3;
  static constexpr double kRidge = 0.01;  // of the keys' own weight

  void Observe(int64_t tokens, int64_t keys, double seconds);
  // The fit once kMinSteps steps have been seen; nullopt before.
  const std::optional<StepCost>& cost() const { return cost_; }

 private:
  struct Sample {
    double tokens, keys, seconds;
  };
  void Fit();
  // The weighted sums sum w * x * y over the window, newest weighing 1.
  template <typename X, typename Y>
  double Sum(X x, Y y) const;

  std::deque<Sample> window_;  // oldest first
  std::optional<StepCost> cost_;
};

}  // namespace shardlm
