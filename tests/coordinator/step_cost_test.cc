// The step cost model behind --target-step-ms: what it learns from timed steps.
#include "coordinator/step_cost.h"

#include <gtest/gtest.h>

#include <limits>

namespace shardlm {
namespace {

// A prompt chunk of `tokens` tokens from position `start`: the keys its tokens attend to.
int64_t KeysOf(int64_t start, int64_t tokens) { return tokens * start + tokens * (tokens + 1) / 2; }

TEST(StepCostModelTest, NothingBeforeThreeSteps) {
  StepCostModel m;
  m.Observe(128, KeysOf(0, 128), 0.1);
  m.Observe(128, KeysOf(128, 128), 0.12);
  EXPECT_FALSE(m.cost().has_value());
  m.Observe(128, KeysOf(256, 128), 0.14);
  EXPECT_TRUE(m.cost().has_value());
}

TEST(StepCostModelTest, RecoversTheCostOfTokensAndKeys) {
  // 1 ms a token and 1 us a key: a token at position 2000 costs 3x one at 0.
  StepCostModel m;
  for (int64_t start = 0; start < 2000; start += 200) {
    m.Observe(200, KeysOf(start, 200), 200 * 1e-3 + KeysOf(start, 200) * 1e-6);
  }
  ASSERT_TRUE(m.cost().has_value());
  EXPECT_NEAR(m.cost()->per_token, 1e-3, 2e-5);
  EXPECT_NEAR(m.cost()->per_key, 1e-6, 2e-8);
  // Beyond the depths seen, within 1% (the ridge leans a little towards tokens).
  EXPECT_NEAR(m.cost()->Seconds(100, KeysOf(3000, 100)), 0.1 + KeysOf(3000, 100) * 1e-6, 4e-3);
}

TEST(StepCostModelTest, StepsAtOneDepthOverestimateShallowerWork) {
  // Short steps deep in a prompt (tokens and keys in proportion) cannot tell
  // the two costs apart: the model must still fit them, and must not make a
  // chunk at position 0 look cheaper than it is (true cost: 1 ms a token, 1 us
  // a key, plus 20 ms a step).
  StepCostModel m;
  for (int i = 0; i < 20; ++i) {
    const int64_t keys = KeysOf(1950 + i, 32);
    m.Observe(32, keys, 0.02 + 32e-3 + keys * 1e-6);
  }
  ASSERT_TRUE(m.cost().has_value());
  const StepCost& c = *m.cost();
  const int64_t deep = KeysOf(1970, 32);
  EXPECT_NEAR(c.Seconds(32, deep), 0.02 + 32e-3 + deep * 1e-6, 2e-3);
  const int64_t shallow = KeysOf(0, 256);
  EXPECT_GE(c.Seconds(256, shallow), 0.02 + 256e-3 + shallow * 1e-6);
}

TEST(StepCostModelTest, CoefficientsNeverGoNegative) {
  // Deeper steps that ran faster (noise, a neighbour gone): a plain fit would
  // give keys a negative cost; the model drops the term instead.
  StepCostModel m;
  m.Observe(100, KeysOf(0, 100), 0.30);
  m.Observe(100, KeysOf(1000, 100), 0.20);
  m.Observe(100, KeysOf(2000, 100), 0.10);
  ASSERT_TRUE(m.cost().has_value());
  EXPECT_GE(m.cost()->per_token, 0);
  EXPECT_EQ(m.cost()->per_key, 0);
  EXPECT_NEAR(m.cost()->per_token, 0.002, 5e-4);
}

TEST(StepCostModelTest, KeysAloneWhenTokensComeOutNegative) {
  // Steps whose time the keys explain and tokens take away from (a plain fit:
  // -1 ms a token): the better term alone, keys, not tokens. (At -0.1 ms the
  // ridge already keeps the fit's per_token positive.)
  StepCostModel m;
  for (int i = 0; i < 10; ++i) {
    const int64_t tokens = 50 + 15 * i, keys = KeysOf(1000 + 100 * i, tokens);
    m.Observe(tokens, keys, 3e-6 * keys - 1e-3 * tokens);
  }
  ASSERT_TRUE(m.cost().has_value());
  EXPECT_EQ(m.cost()->per_token, 0);
  // Keys alone take the tokens' (negative) share in: a little under 3 us.
  EXPECT_GT(m.cost()->per_key, 2e-6);
  EXPECT_LT(m.cost()->per_key, 3e-6);
}

TEST(StepCostModelTest, NewerStepsWeighMore) {
  // The machine got twice as slow (a neighbour took a core): within a few
  // steps the model says so.
  StepCostModel m;
  for (int i = 0; i < 32; ++i) m.Observe(128, KeysOf(0, 128), 0.128);
  for (int i = 0; i < 8; ++i) m.Observe(128, KeysOf(0, 128), 0.256);
  ASSERT_TRUE(m.cost().has_value());
  EXPECT_GT(m.cost()->Seconds(128, KeysOf(0, 128)), 0.2);
}

TEST(StepCostModelTest, IgnoresStepsWithoutTokensOrTime) {
  StepCostModel m;
  m.Observe(0, 0, 0.1);
  m.Observe(10, -5, 0.01);
  m.Observe(10, 55, -1);
  m.Observe(10, 55, std::numeric_limits<double>::infinity());
  m.Observe(10, 55, std::numeric_limits<double>::quiet_NaN());
  m.Observe(10, 55, 0.01);
  m.Observe(10, 55, 0.01);
  EXPECT_FALSE(m.cost().has_value());
}

}  // namespace
}  // namespace shardlm
