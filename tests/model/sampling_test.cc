#include "model/sampling.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

namespace shardlm {
namespace {

using ::testing::ElementsAre;

SampleRow Row(const SamplingParams* p, uint64_t seed = 1) {
  SampleRow r;
  r.sample = true;
  r.params = p;
  r.draw_seed = seed;
  return r;
}

double LogSoftmaxAt(const std::vector<float>& x, int i) {
  double m = *std::max_element(x.begin(), x.end()), s = 0;
  for (float v : x) s += std::exp(v - m);
  return x[i] - m - std::log(s);
}

TEST(SamplingTest, GreedyPicksArgmaxAndReportsModelLogprob) {
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f};
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 1.0f;
  RowResult r = ProcessRow(logits.data(), 4, Row(&p));
  EXPECT_EQ(r.token, 1);
  EXPECT_NEAR(r.logprob, LogSoftmaxAt(logits, 1), 1e-6);
}

// A constraint's mask (bit i of word i / 32): only allowed tokens are drawn,
// greedy or not, and the log-prob stays the model's own.
TEST(SamplingTest, MaskKeepsDrawsToAllowedTokens) {
  std::vector<float> logits(70, 0.0f);
  logits[1] = 9.0f;  // the model's favourite, disallowed
  logits[40] = 1.0f;
  logits[65] = 2.0f;
  std::vector<uint32_t> mask(3, 0);
  for (int id : {40, 65}) mask[id / 32] |= 1u << (id % 32);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  SampleRow row = Row(&greedy);
  row.allowed = mask.data();
  row.allowed_words = 3;
  RowResult r = ProcessRow(logits.data(), 70, row);
  EXPECT_EQ(r.token, 65);
  EXPECT_NEAR(r.logprob, LogSoftmaxAt(logits, 65), 1e-6) << "the model's distribution, not the masked one";
  SamplingParams drawn;
  drawn.temperature = 1.5f;
  drawn.top_p = 0.95f;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    SampleRow d = Row(&drawn, seed);
    d.allowed = mask.data();
    d.allowed_words = 3;
    const int32_t t = ProcessRow(logits.data(), 70, d).token;
    EXPECT_TRUE(t == 40 || t == 65) << "seed " << seed << " drew " << t;
  }
  // Ids past the mask's words are never allowed.
  row.allowed_words = 1;
  std::vector<float> wide(70, 0.0f);
  wide[3] = -1.0f;
  wide[50] = 5.0f;
  mask[0] = 1u << 3;
  EXPECT_EQ(ProcessRow(wide.data(), 70, row).token, 3);
}

TEST(SamplingTest, TargetLogprobAndSortedTopAlternatives) {
  std::vector<float> logits = {0.5f, 3.0f, 1.0f, 2.0f, -4.0f};
  SamplingParams p;
  p.num_top_logprobs = 3;
  SampleRow row;
  row.params = &p;
  row.target = 4;
  RowResult r = ProcessRow(logits.data(), 5, row);
  EXPECT_EQ(r.token, -1) << "no draw unless asked";
  EXPECT_NEAR(r.target_logprob, LogSoftmaxAt(logits, 4), 1e-6);
  EXPECT_THAT(r.top_ids, ElementsAre(1, 3, 2));
  EXPECT_NEAR(r.top_logprobs[0], LogSoftmaxAt(logits, 1), 1e-6);
}

TEST(SamplingTest, SameSeedSameTokenAndTemperatureFollowsDistribution) {
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  SamplingParams p;
  std::map<int, int> counts;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    RowResult a = ProcessRow(logits.data(), 3, Row(&p, DrawSeed(7, i)));
    RowResult b = ProcessRow(logits.data(), 3, Row(&p, DrawSeed(7, i)));
    ASSERT_EQ(a.token, b.token);
    ++counts[a.token];
  }
  // 20k draws: the standard error of each frequency is < 0.004.
  EXPECT_NEAR(counts[0] / double(n), 0.5, 0.02);
  EXPECT_NEAR(counts[1] / double(n), 0.3, 0.02);
  EXPECT_NEAR(counts[2] / double(n), 0.2, 0.02);
}

TEST(SamplingTest, TopKTopPMinPRestrictTheCandidates) {
  std::vector<float> logits = {std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)};
  for (int i = 0; i < 2000; ++i) {
    SamplingParams k;
    k.top_k = 2;
    EXPECT_LT(ProcessRow(logits.data(), 4, Row(&k, DrawSeed(1, i))).token, 2);
    SamplingParams tp;
    tp.top_p = 0.65f;  // 0.4 + 0.3 reaches it
    EXPECT_LT(ProcessRow(logits.data(), 4, Row(&tp, DrawSeed(2, i))).token, 2);
    SamplingParams mp;
    mp.min_p = 0.6f;  // keeps p >= 0.24
    EXPECT_LT(ProcessRow(logits.data(), 4, Row(&mp, DrawSeed(3, i))).token, 2);
  }
}

TEST(SamplingTest, PenaltiesSteerAwayFromSeenTokens) {
  std::vector<float> logits = {2.0f, 1.9f, -5.0f};
  std::vector<int32_t> prompt = {0}, generated = {};
  SamplingParams rep;
  rep.temperature = 0.0f;
  rep.repetition_penalty = 1.2f;  // 2.0 / 1.2 < 1.9
  SampleRow row = Row(&rep);
  row.prompt = &prompt;
  row.generated = &generated;
  EXPECT_EQ(ProcessRow(logits.data(), 3, row).token, 1);

  std::vector<int32_t> seen = {0, 0};
  SamplingParams freq;
  freq.temperature = 0.0f;
  freq.frequency_penalty = 0.1f;  // 2.0 - 0.2 < 1.9
  row = Row(&freq);
  row.generated = &seen;
  EXPECT_EQ(ProcessRow(logits.data(), 3, row).token, 1);
  SamplingParams pres;
  pres.temperature = 0.0f;
  pres.presence_penalty = 0.05f;  // 1.95 > 1.9: still token 0
  row.params = &pres;
  EXPECT_EQ(ProcessRow(logits.data(), 3, row).token, 0);
  // Logprobs stay those of the unpenalised model.
  EXPECT_NEAR(ProcessRow(logits.data(), 3, row).logprob, LogSoftmaxAt(logits, 0), 1e-6);
}

TEST(SamplingTest, PenaltyLastNSeesOnlyTheSequencesLastTokens) {
  std::vector<float> logits = {2.0f, 1.9f, 1.8f, -5.0f};
  // The sequence is 0 (prompt), 1 (prompt), 3 (generated): token 0 is 3 back.
  std::vector<int32_t> prompt = {0, 1}, generated = {3};
  SamplingParams rep;
  rep.temperature = 0.0f;
  rep.repetition_penalty = 1.2f;
  SampleRow row = Row(&rep);
  row.prompt = &prompt;
  row.generated = &generated;
  EXPECT_EQ(ProcessRow(logits.data(), 4, row).token, 2);  // 0 and 1 both penalised
  rep.penalty_last_n = 2;                                 // sees 1 and 3: token 0 is free again
  EXPECT_EQ(ProcessRow(logits.data(), 4, row).token, 0);
  rep.penalty_last_n = 1;  // sees 3 only
  EXPECT_EQ(ProcessRow(logits.data(), 4, row).token, 0);
  rep.penalty_last_n = 3;  // the whole sequence
  EXPECT_EQ(ProcessRow(logits.data(), 4, row).token, 2);

  // Presence and frequency count the generated tokens inside the window.
  std::vector<int32_t> out = {0, 0, 1};
  SamplingParams freq;
  freq.temperature = 0.0f;
  freq.frequency_penalty = 0.15f;
  freq.penalty_last_n = 1;  // sees the last 1: token 1 falls to 1.75, token 0 stays 2.0
  row = Row(&freq);
  row.generated = &out;
  EXPECT_EQ(ProcessRow(logits.data(), 4, row).token, 0);
  freq.penalty_last_n = 0;  // sees all: token 0 falls to 1.7, token 1 to 1.75, token 2 stays 1.8
  EXPECT_EQ(ProcessRow(logits.data(), 4, row).token, 2);
}

}  // namespace
}  // namespace shardlm
