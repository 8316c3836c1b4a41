// The step cost model behind --target-step-ms: what it learns from timed steps.
#include "coordinator/engine/step_cost.h"

#include <gtest/gtest.h>

#include <limits>

#include "coordinator/engine/decode_step_times.h"

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
  // The 1% ridge leans towards tokens: on these steps per_token comes out about
  // 6% high and per_key 5% low, and a chunk beyond the depths seen within 3%.
  EXPECT_NEAR(m.cost()->per_token, 1e-3, 8e-5);
  EXPECT_NEAR(m.cost()->per_key, 1e-6, 6e-8);
  EXPECT_NEAR(m.cost()->Seconds(100, KeysOf(3000, 100)), 0.1 + KeysOf(3000, 100) * 1e-6, 1.2e-2);
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

TEST(StepCostModelTest, TokensAloneWhenTokensComeOutNegative) {
  // Steps deep in a prompt whose time the keys explain and tokens take away
  // from (a plain fit: -2.5 ms a token). Keys alone would fit them better, but
  // would make a new prompt's first chunk look almost free: tokens alone,
  // which overestimate it.
  StepCostModel m;
  for (int i = 0; i < 10; ++i) {
    const int64_t tokens = 50 + 15 * i, keys = KeysOf(1000 + 100 * i, tokens);
    m.Observe(tokens, keys, 3e-6 * keys - 2.5e-3 * tokens);
  }
  ASSERT_TRUE(m.cost().has_value());
  EXPECT_EQ(m.cost()->per_key, 0);
  EXPECT_GT(m.cost()->per_token, 0);
  // A 256-token chunk at position 0, at the steps' own rates, costs less than the model says.
  EXPECT_GE(m.cost()->ChunkSeconds(0, 256), 3e-6 * KeysOf(0, 256) - 2.5e-3 * 256);
  EXPECT_GE(m.cost()->ChunkSeconds(0, 256), 3e-6 * KeysOf(0, 256));
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

namespace shardlm {
namespace {

TEST(DecodeStepTimesTest, EstimatesRowCountsBetweenAndBeyondTheMeasuredOnes) {
  DecodeStepTimes t;
  EXPECT_FALSE(t.Estimate(1).has_value());
  t.Observe(1, 20.0);
  // One count measured: a tenth of it per row more or less.
  EXPECT_DOUBLE_EQ(*t.Estimate(1), 20.0);
  EXPECT_DOUBLE_EQ(*t.Estimate(3), 24.0);
  t.Observe(3, 30.0);
  EXPECT_DOUBLE_EQ(*t.Estimate(2), 25.0);  // between the two
  EXPECT_DOUBLE_EQ(*t.Estimate(5), 40.0);  // on past the larger
  t.Observe(4, 32.0);
  EXPECT_DOUBLE_EQ(*t.Estimate(6), 36.0);  // the two nearest: 3 and 4
  // A moving average: the newest step weighs a fifth.
  t.Observe(1, 30.0);
  EXPECT_DOUBLE_EQ(*t.Estimate(1), 22.0);
  t.Observe(0, 5.0);  // no rows, or no time: ignored
  t.Observe(2, 0.0);
  EXPECT_DOUBLE_EQ(*t.Estimate(2), 26.0);
}

}  // namespace
}  // namespace shardlm
