// Speculative decoding by prompt lookup (docs/speculative_decoding.md) over a
// real single-rank worker on a tiny random checkpoint: the proposer, greedy
// and seeded outputs equal to plain decoding's, the sampled distribution
// unchanged (a chi-square test), and the rollback: every block back, and no
// rejected token in a later prefix-cache hit or handle.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "coordinator/engine/engine.h"
#include "coordinator/engine/engine_runner.h"
#include "coordinator/engine/ngram_proposer.h"
#include "coordinator/engine/service_metrics.h"
#include "formats/tiny_model.h"
#include "tests/testing/status_matchers.h"
#include "worker/rank_worker.h"

namespace shardlm {
namespace {

using ::shardlm::testing::IsOk;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(NgramProposerTest, ProposesWhatFollowedTheLongestEarlierMatch) {
  // "5 6" occurred at 0 (followed by 7 9 5 6); "6" alone also at 1.
  EXPECT_THAT(ProposeNgram({5, 6, 7, 9, 5, 6}, 3, {}), ElementsAre(7, 9, 5));
  // The longest suffix wins over a more recent shorter one: "1 2" -> 3, not "2" -> 8.
  EXPECT_THAT(ProposeNgram({1, 2, 3, 4, 2, 8, 1, 2}, 2, {}), ElementsAre(3, 4));
  // The most recent occurrence of the longest: 2 3 -> 5 (at 4), not -> 4 (at 0).
  EXPECT_THAT(ProposeNgram({2, 3, 4, 0, 2, 3, 5, 2, 3}, 1, {}), ElementsAre(5));
  // Cut at the end of what is known.
  EXPECT_THAT(ProposeNgram({7, 8, 7}, 5, {}), ElementsAre(8, 7));
  EXPECT_THAT(ProposeNgram({1, 2, 3}, 4, {}), IsEmpty());
  EXPECT_THAT(ProposeNgram({4}, 4, {}), IsEmpty());
  EXPECT_THAT(ProposeNgram({4, 4}, 0, {}), IsEmpty());
  // min_n: a one-token match is not enough.
  EXPECT_THAT(ProposeNgram({1, 9, 2, 1}, 2, NgramOptions{2, 4}), IsEmpty());
}

class SpeculationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "/speculation_test_model." + std::to_string(::getpid()));
    std::filesystem::remove_all(*dir_);
    TinyModelOptions o;
    o.arch = Arch::kLlama;
    o.vocab_size = 64;
    o.hidden_size = 64;
    o.num_heads = 4;
    o.num_kv_heads = 2;
    o.intermediate_size = 128;
    o.max_position_embeddings = 512;
    o.seed = 7;
    ASSERT_THAT(WriteTinyModel(*dir_, o), IsOk());
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(*dir_); }

  void SetUp() override {
    RankWorkerOptions o;
    o.model_dir = *dir_;
    o.kv_cache_bytes = 64 << 20;
    auto w = RankWorker::Load(o, MakeSingleRankCommunicator());
    ASSERT_THAT(w, IsOk());
    worker_ = std::move(*w);
  }

  std::unique_ptr<Engine> MakeEngine(bool speculate, bool prefix_caching = true) {
    Engine::Options eo;
    eo.metrics = &metrics_;
    eo.prefix_caching = prefix_caching;
    if (speculate) eo.speculation.method = Engine::Options::Speculation::Method::kNgram;
    return std::make_unique<Engine>(worker_.get(), worker_->config(),
                                    static_cast<int32_t>(worker_->num_blocks()),
                                    static_cast<int32_t>(worker_->block_size()), eo);
  }

  // A prompt that repeats itself, so that prompt lookup has something to propose.
  static std::vector<int32_t> Repetitive(int32_t salt) {
    std::vector<int32_t> p;
    for (int32_t rep = 0; rep < 3; ++rep) {
      for (int32_t i = 0; i < 9; ++i) p.push_back((i * 5 + salt * 3) % 64);
    }
    return p;
  }

  static EngineRequest Request(std::vector<int32_t> prompt, int32_t n, float temperature, uint64_t seed) {
    EngineRequest r;
    r.prompt = std::move(prompt);
    r.max_new_tokens = n;
    r.ignore_eos = true;
    r.sampling.temperature = temperature;
    r.sampling.seed = seed;
    r.has_seed = true;
    return r;
  }

  EngineResult Run(Engine& e, EngineRequest r) {
    auto result = EngineRunner(&e).Run(std::move(r));
    EXPECT_THAT(result, IsOk());
    return result.ok() ? *result : EngineResult{};
  }

  static std::string* dir_;
  MetricsRegistry registry_;
  ServiceMetrics metrics_{&registry_};
  std::unique_ptr<RankWorker> worker_;
};
std::string* SpeculationTest::dir_ = nullptr;

TEST_F(SpeculationTest, GreedyOutputEqualsPlainDecoding) {
  auto plain = MakeEngine(false);
  auto spec = MakeEngine(true);
  for (int32_t salt = 0; salt < 6; ++salt) {
    const EngineResult a = Run(*plain, Request(Repetitive(salt), 40, 0.0f, 1));
    const EngineResult b = Run(*spec, Request(Repetitive(salt), 40, 0.0f, 1));
    EXPECT_EQ(a.tokens, b.tokens) << "prompt " << salt;
    ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
    for (size_t i = 0; i < a.logprobs.size(); ++i) EXPECT_NEAR(a.logprobs[i], b.logprobs[i], 1e-4);
  }
  // Proposals were made and some accepted (else this tested nothing).
  EXPECT_GT(metrics_.spec_draft_tokens->value(), 0);
  EXPECT_GT(metrics_.spec_accepted_tokens->value(), 0);
  EXPECT_LT(spec->stats().steps, plain->stats().steps);  // fewer steps: speculation paid
}

TEST_F(SpeculationTest, SeededSamplingDrawsTheSameTokensWithPenalties) {
  auto plain = MakeEngine(false);
  auto spec = MakeEngine(true);
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    EngineRequest r = Request(Repetitive(static_cast<int32_t>(seed)), 32, 0.7f, seed);
    r.sampling.top_p = 0.9f;
    r.sampling.repetition_penalty = 1.1f;
    r.sampling.presence_penalty = 0.3f;
    const EngineResult a = Run(*plain, r);
    const EngineResult b = Run(*spec, r);
    EXPECT_EQ(a.tokens, b.tokens) << "seed " << seed;
  }
  EXPECT_GT(metrics_.spec_accepted_tokens->value(), 0);
}

// The law of the 11th token drawn, over many seeds, with and without
// speculation (disjoint seeds, so the two samples are independent): a
// chi-square test of homogeneity at the 0.001 level. Measured: 11.5 against
// a bound of 42.4 (19 cells; 1785 of 15203 proposals accepted); with every
// proposal taken unverified, 974.
TEST_F(SpeculationTest, SampledDistributionIsUnchanged) {
  auto plain = MakeEngine(false);
  auto spec = MakeEngine(true);
  constexpr int kDraws = 1500;
  constexpr int kPosition = 10;
  std::map<int32_t, int> with, without;
  // The prompt and its greedy continuation, which falls into a loop: drawn
  // at a low temperature from two tokens, the output loops too, and lookup's
  // proposals are often drawn.
  std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6};
  const EngineResult greedy = Run(*plain, Request(prompt, 8, 0.0f, 1));
  prompt.insert(prompt.end(), greedy.tokens.begin(), greedy.tokens.end());
  auto request = [&](uint64_t seed) {
    EngineRequest r = Request(prompt, kPosition + 1, 0.5f, seed);
    r.sampling.top_k = 2;
    return r;
  };
  for (int i = 0; i < kDraws; ++i) {
    ++without[Run(*plain, request(1000 + i)).tokens[kPosition]];
    ++with[Run(*spec, request(900000 + i)).tokens[kPosition]];
  }
  ASSERT_GT(metrics_.spec_accepted_tokens->value(), 100);
  // Cells with fewer than 10 expected draws pooled into one.
  double chi2 = 0;
  int cells = 0, pooled_a = 0, pooled_b = 0;
  std::map<int32_t, int> all = without;
  for (const auto& [t, c] : with) all[t] += 0;
  for (const auto& [t, ignored] : all) {
    const int a = without.count(t) ? without[t] : 0, b = with.count(t) ? with[t] : 0;
    if ((a + b) / 2.0 < 10) {
      pooled_a += a;
      pooled_b += b;
      continue;
    }
    const double e = (a + b) / 2.0;
    chi2 += (a - e) * (a - e) / e + (b - e) * (b - e) / e;
    ++cells;
  }
  if (pooled_a + pooled_b > 0) {
    const double e = (pooled_a + pooled_b) / 2.0;
    chi2 += (pooled_a - e) * (pooled_a - e) / e + (pooled_b - e) * (pooled_b - e) / e;
    ++cells;
  }
  ASSERT_GE(cells, 3);
  // The 0.999 quantile of chi-square with k degrees of freedom, Wilson-Hilferty.
  const double k = cells - 1, z = 3.0902;
  const double bound = k * std::pow(1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k)), 3);
  EXPECT_LT(chi2, bound) << cells << " cells";
}

TEST_F(SpeculationTest, RollbackFreesBlocksAndCachesOnlyKeptTokens) {
  auto spec = MakeEngine(true);
  const int32_t blocks = spec->stats().num_blocks;
  // Sampled, so that proposals are rejected as well as accepted.
  EngineRequest first = Request(Repetitive(3), 60, 1.0f, 5);
  first.keep_handle = true;
  const EngineResult a = Run(*spec, first);
  ASSERT_FALSE(a.handle.empty());
  ASSERT_GT(metrics_.spec_draft_tokens->value(), metrics_.spec_accepted_tokens->value());
  // The prompt and output again: a prefix-cache hit over the blocks the
  // speculating request published, then greedy tokens after it.
  std::vector<int32_t> again = Repetitive(3);
  again.insert(again.end(), a.tokens.begin(), a.tokens.end());
  const EngineResult cached = Run(*spec, Request(again, 12, 0.0f, 1));
  EXPECT_GT(cached.cached_tokens, 32);
  EngineRequest from_handle = Request({5, 6}, 12, 0.0f, 1);
  from_handle.prefix_handle = a.handle;
  const EngineResult continued = Run(*spec, from_handle);
  ASSERT_THAT(spec->ReleaseHandle(a.handle), IsOk());
  // Every block back (free or evictable cache), none held.
  const Engine::Stats s = spec->stats();
  EXPECT_EQ(s.referenced_blocks, 0);
  EXPECT_EQ(s.free_blocks, blocks);

  // The same computed from scratch, with no cache and no speculation.
  auto fresh = MakeEngine(false, /*prefix_caching=*/false);
  EXPECT_EQ(Run(*fresh, Request(again, 12, 0.0f, 1)).tokens, cached.tokens);
  std::vector<int32_t> whole = again;
  whole.insert(whole.end(), {5, 6});
  EXPECT_EQ(Run(*fresh, Request(whole, 12, 0.0f, 1)).tokens, continued.tokens);
}

}  // namespace
}  // namespace shardlm
