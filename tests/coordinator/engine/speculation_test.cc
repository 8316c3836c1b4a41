// Speculative decoding (docs/speculative_decoding.md) over a real single-rank
// worker on a tiny random checkpoint, by prompt lookup and by a draft model
// (a second rank in this process): the proposers, greedy and seeded outputs
// equal to plain decoding's, the sampled distribution unchanged (a
// chi-square test), and the rollback: every block back, and no rejected
// token in a later prefix-cache hit or handle.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <regex>

#include "constraints/constraint_compiler.h"
#include "coordinator/engine/draft_proposer.h"
#include "coordinator/engine/engine.h"
#include "coordinator/engine/engine_runner.h"
#include "coordinator/engine/ngram_proposer.h"
#include "coordinator/engine/service_metrics.h"
#include "formats/tiny_model.h"
#include "tests/testing/byte_vocabulary.h"
#include "tests/testing/status_matchers.h"
#include "tokenizer/tokenizer.h"
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

// The tiny checkpoints: the target (seed 7) and another of its shape and
// vocabulary (seed 8), a draft whose proposals are mostly rejected.
class TinyModels {
 public:
  static void Write() {
    dir_ = new std::string(::testing::TempDir() + "/speculation_test_model." + std::to_string(::getpid()));
    other_ = new std::string(*dir_ + ".other");
    for (const std::string* d : {dir_, other_}) {
      std::filesystem::remove_all(*d);
      TinyModelOptions o;
      o.arch = Arch::kLlama;
      o.vocab_size = 64;
      o.hidden_size = 64;
      o.num_heads = 4;
      o.num_kv_heads = 2;
      o.intermediate_size = 128;
      o.max_position_embeddings = 512;
      o.seed = d == dir_ ? 7 : 8;
      ASSERT_THAT(WriteTinyModel(*d, o), IsOk());
    }
  }
  static void Remove() {
    std::filesystem::remove_all(*dir_);
    std::filesystem::remove_all(*other_);
  }
  static std::unique_ptr<RankWorker> Load(const std::string& dir, int64_t kv_bytes = 64 << 20) {
    RankWorkerOptions o;
    o.model_dir = dir;
    o.kv_cache_bytes = kv_bytes;
    auto w = RankWorker::Load(o, MakeSingleRankCommunicator());
    EXPECT_THAT(w, IsOk());
    return w.ok() ? std::move(*w) : nullptr;
  }
  static std::string* dir_;
  static std::string* other_;
};
std::string* TinyModels::dir_ = nullptr;
std::string* TinyModels::other_ = nullptr;

// Each proposer: prompt lookup, a draft model with the target's weights
// (its greedy proposals are the target's argmax, so that sampled rows accept
// some and reject others) alone, and that draft with prompt lookup first
// where the last 3 tokens occurred before.
enum class Proposer { kNgram, kDraft, kDraftLookup };

class SpeculationTest : public ::testing::TestWithParam<Proposer> {
 protected:
  static void SetUpTestSuite() { TinyModels::Write(); }
  static void TearDownTestSuite() { TinyModels::Remove(); }

  void SetUp() override {
    worker_ = TinyModels::Load(*TinyModels::dir_);
    ASSERT_NE(worker_, nullptr);
    if (GetParam() != Proposer::kNgram) {
      draft_worker_ = TinyModels::Load(*TinyModels::dir_, 8 << 20);
      ASSERT_NE(draft_worker_, nullptr);
      draft_ = std::make_unique<DraftModelProposer>(
          draft_worker_.get(), static_cast<int32_t>(draft_worker_->num_blocks()),
          static_cast<int32_t>(draft_worker_->block_size()), std::vector<int64_t>{});
    }
  }

  // The proposed tokens each proposer made, checked after each test: prompt
  // lookup's all of them with the method, none with the draft alone, and
  // some (not all) with the draft and lookup first; every proposal the
  // same with the engine's totals.
  void TearDown() override {
    const double all = metrics_.spec_draft_tokens->value(), lookup = metrics_.spec_lookup_tokens->value();
    if (all == 0) return;
    switch (GetParam()) {
      case Proposer::kNgram:
        EXPECT_EQ(lookup, all);
        break;
      case Proposer::kDraft:
        EXPECT_EQ(lookup, 0);
        break;
      case Proposer::kDraftLookup:
        EXPECT_GT(lookup, 0);
        EXPECT_LT(lookup, all);
        break;
    }
    EXPECT_LE(metrics_.spec_lookup_accepted_tokens->value(), lookup);
  }

  std::unique_ptr<Engine> MakeEngine(bool speculate, bool prefix_caching = true) {
    Engine::Options eo;
    eo.metrics = &metrics_;
    eo.prefix_caching = prefix_caching;
    if (speculate && GetParam() == Proposer::kNgram) {
      eo.speculation.method = Engine::Options::Speculation::Method::kNgram;
      eo.speculation.row_cost = 0.05;  // as below
    } else if (speculate) {
      eo.speculation.method = Engine::Options::Speculation::Method::kDraft;
      eo.speculation.draft = draft_.get();
      // Tiny models' passes cost about what a step does: fixed costs keep
      // the proposal lengths (and so these tests) independent of timing.
      eo.speculation.draft_cost = 0.1;
      eo.speculation.row_cost = 0.05;
      eo.speculation.lookup_min_n = GetParam() == Proposer::kDraftLookup ? 3 : 0;
    }
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

  MetricsRegistry registry_;
  ServiceMetrics metrics_{&registry_};
  std::unique_ptr<RankWorker> worker_;
  std::unique_ptr<RankWorker> draft_worker_;
  std::unique_ptr<DraftModelProposer> draft_;
};

INSTANTIATE_TEST_SUITE_P(Proposers, SpeculationTest,
                         ::testing::Values(Proposer::kNgram, Proposer::kDraft, Proposer::kDraftLookup),
                         [](const ::testing::TestParamInfo<Proposer>& p) {
                           return p.param == Proposer::kNgram   ? "ngram"
                                  : p.param == Proposer::kDraft ? "draft"
                                                                : "draft_lookup";
                         });

TEST_P(SpeculationTest, GreedyOutputEqualsPlainDecoding) {
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

TEST_P(SpeculationTest, SeededSamplingDrawsTheSameTokensWithPenalties) {
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
TEST_P(SpeculationTest, SampledDistributionIsUnchanged) {
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

TEST_P(SpeculationTest, RollbackFreesBlocksAndCachesOnlyKeptTokens) {
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
  // Every block back (free or evictable cache), none held; the draft's too.
  const Engine::Stats s = spec->stats();
  EXPECT_EQ(s.referenced_blocks, 0);
  EXPECT_EQ(s.free_blocks, blocks);
  if (draft_) {
    EXPECT_EQ(draft_->free_blocks(), draft_->num_blocks());
  }

  // The same computed from scratch, with no cache and no speculation.
  auto fresh = MakeEngine(false, /*prefix_caching=*/false);
  EXPECT_EQ(Run(*fresh, Request(again, 12, 0.0f, 1)).tokens, cached.tokens);
  std::vector<int32_t> whole = again;
  whole.insert(whole.end(), {5, 6});
  EXPECT_EQ(Run(*fresh, Request(whole, 12, 0.0f, 1)).tokens, continued.tokens);
}

// A draft that is another model (another seed): most proposals rejected,
// the output still plain decoding's, token for token.
TEST(DraftSpeculationTest, AnotherModelsProposalsLeaveGreedyOutputUnchanged) {
  TinyModels::Write();
  auto target = TinyModels::Load(*TinyModels::dir_);
  auto other = TinyModels::Load(*TinyModels::other_, 8 << 20);
  ASSERT_NE(target, nullptr);
  ASSERT_NE(other, nullptr);
  DraftModelProposer draft(other.get(), static_cast<int32_t>(other->num_blocks()),
                           static_cast<int32_t>(other->block_size()), {});
  MetricsRegistry registry;
  ServiceMetrics metrics(&registry);
  auto make = [&](bool speculate) {
    Engine::Options eo;
    eo.metrics = &metrics;
    if (speculate) {
      eo.speculation.method = Engine::Options::Speculation::Method::kDraft;
      eo.speculation.draft = &draft;
      eo.speculation.draft_cost = 0.01;  // propose, however few are accepted
      eo.speculation.row_cost = 0.01;
    }
    return std::make_unique<Engine>(target.get(), target->config(),
                                    static_cast<int32_t>(target->num_blocks()),
                                    static_cast<int32_t>(target->block_size()), eo);
  };
  auto plain = make(false);
  auto spec = make(true);
  for (int32_t salt = 0; salt < 4; ++salt) {
    EngineRequest r;
    for (int32_t i = 0; i < 20; ++i) r.prompt.push_back((i * 7 + salt * 11) % 64);
    r.max_new_tokens = 30;
    r.ignore_eos = true;
    r.sampling.temperature = 0.0f;
    auto a = EngineRunner(plain.get()).Run(r);
    auto b = EngineRunner(spec.get()).Run(r);
    ASSERT_THAT(a, IsOk());
    ASSERT_THAT(b, IsOk());
    EXPECT_EQ(a->tokens, b->tokens) << "prompt " << salt;
  }
  EXPECT_GT(metrics.spec_draft_tokens->value(), 2 * metrics.spec_accepted_tokens->value());
  EXPECT_EQ(draft.free_blocks(), draft.num_blocks());
  TinyModels::Remove();
}

// The proposer alone: k greedy tokens of the draft model, the same whether
// its cache is fresh, caught up from a longer history, or rolled back past
// proposals the target rejected; a long history fed over several calls;
// every block back when sequences are forgotten or evicted.
TEST(DraftModelProposerTest, ProposesTheDraftsGreedyContinuationFromAnyCache) {
  TinyModels::Write();
  auto worker = TinyModels::Load(*TinyModels::dir_);
  ASSERT_NE(worker, nullptr);
  const int32_t bs = static_cast<int32_t>(worker->block_size());
  // The draft's own greedy continuation, from a plain engine on the same rank.
  auto greedy = [&](const std::vector<int32_t>& prompt, int32_t n) {
    Engine::Options eo;
    eo.prefix_caching = false;
    Engine e(worker.get(), worker->config(), static_cast<int32_t>(worker->num_blocks()), bs, eo);
    EngineRequest r;
    r.prompt = prompt;
    r.max_new_tokens = n;
    r.ignore_eos = true;
    r.sampling.temperature = 0.0f;
    auto out = EngineRunner(&e).Run(r);
    EXPECT_THAT(out, IsOk());
    return out.ok() ? out->tokens : std::vector<int32_t>{};
  };
  std::vector<int32_t> history;
  for (int32_t i = 0; i < 40; ++i) history.push_back((i * 13 + 5) % 64);
  const std::vector<int32_t> expected = greedy(history, 4);
  ASSERT_EQ(expected.size(), 4u);
  // What a fresh cache would propose after the target kept the first two
  // proposals and drew another token, and for a second, longer sequence:
  // all computed before the proposers below write the same pool's blocks.
  std::vector<int32_t> kept = history;
  kept.insert(kept.end(), {expected[0], expected[1], (expected[2] + 1) % 64});
  const std::vector<int32_t> after = greedy(kept, 3);
  const std::vector<int32_t> second(100, 3);
  const std::vector<int32_t> after_second = greedy(second, 2);

  // A pool of 8 blocks (its own part of the worker's: the engine above is gone).
  DraftModelProposer::Options o;
  o.max_catch_up = 32;
  DraftModelProposer draft(worker.get(), 8, bs, {}, o);
  // 40 tokens over a catch-up budget of 32: nothing the first call, then all four.
  EXPECT_THAT(draft.Propose({{1, &history, 4}})[0], IsEmpty());
  EXPECT_EQ(draft.Propose({{1, &history, 4}})[0], expected);
  // The target kept the first two proposals and drew another token: the
  // cache rolls back to them and proposes what a fresh one would.
  EXPECT_EQ(draft.Propose({{1, &kept, 3}})[0], after);
  // A second sequence needs room: the first one's blocks (not in this call) are evicted.
  o.max_catch_up = 1000;
  DraftModelProposer roomy(worker.get(), 8, bs, {}, o);
  EXPECT_EQ(roomy.Propose({{1, &kept, 3}})[0], after);
  EXPECT_EQ(roomy.Propose({{2, &second, 2}})[0], after_second);
  EXPECT_EQ(roomy.stats().evictions, 1);
  // Both in one call cannot fit 8 blocks: the one that fits proposes.
  const auto both = roomy.Propose({{2, &second, 2}, {1, &kept, 3}});
  EXPECT_EQ(both[0], after_second);
  EXPECT_THAT(both[1], IsEmpty());
  roomy.Forget(2);
  roomy.Forget(1);
  EXPECT_EQ(roomy.free_blocks(), 8);
  // An end-of-sequence token ends a proposal (the first time it comes).
  DraftModelProposer stops(worker.get(), 8, bs, {expected[1]}, o);
  const auto eos = std::find(expected.begin(), expected.end(), expected[1]);
  EXPECT_EQ(stops.Propose({{1, &history, 4}})[0], std::vector<int32_t>(expected.begin(), eos + 1));
  TinyModels::Remove();
}

// With a probability floor, a proposal ends before the first token the
// draft gives less than it (the draft's own softmax, as its logprobs say).
TEST(DraftModelProposerTest, ProposalsEndBeforeTheFirstUnsureToken) {
  TinyModels::Write();
  auto worker = TinyModels::Load(*TinyModels::dir_);
  ASSERT_NE(worker, nullptr);
  const int32_t bs = static_cast<int32_t>(worker->block_size());
  std::vector<int32_t> history;
  for (int32_t i = 0; i < 30; ++i) history.push_back((i * 7 + 3) % 64);
  EngineResult greedy;
  {
    Engine::Options eo;
    eo.prefix_caching = false;
    Engine e(worker.get(), worker->config(), static_cast<int32_t>(worker->num_blocks()), bs, eo);
    EngineRequest r;
    r.prompt = history;
    r.max_new_tokens = 5;
    r.ignore_eos = true;
    r.sampling.temperature = 0.0f;
    auto out = EngineRunner(&e).Run(r);
    ASSERT_THAT(out, IsOk());
    greedy = *out;
  }
  ASSERT_EQ(greedy.logprobs.size(), 5u);
  // The floor just above the least sure token's probability: the proposal
  // is every token before it.
  const auto least = std::min_element(greedy.logprobs.begin(), greedy.logprobs.end());
  const size_t before = static_cast<size_t>(least - greedy.logprobs.begin());
  DraftModelProposer::Options o;
  o.min_probability = std::exp(*least) * 1.001;
  DraftModelProposer floored(worker.get(), 8, bs, {}, o);
  EXPECT_EQ(floored.Propose({{1, &history, 5}})[0],
            std::vector<int32_t>(greedy.tokens.begin(), greedy.tokens.begin() + before));
  EXPECT_EQ(floored.stats().unsure_stops, 1);
  // Just below it: all five.
  o.min_probability = std::exp(*least) * 0.999;
  DraftModelProposer below(worker.get(), 8, bs, {}, o);
  EXPECT_EQ(below.Propose({{1, &history, 5}})[0], greedy.tokens);
  EXPECT_EQ(below.stats().unsure_stops, 0);
  TinyModels::Remove();
}

// Constrained requests speculate too: each proposal row samples under the
// constraint's mask after the proposals before it, and proposals end before
// the first the constraint refuses (the draft proposes under the same masks).
// On a byte vocabulary over a tiny model of 256 ids: every output equals
// plain decoding's, keeps to its constraint, and proposals were accepted.
TEST(ConstrainedSpeculationTest, ProposalRowsSampleUnderTheConstraintsMasks) {
  // A byte-level vocabulary over the tiny model's 256 ids: bytes 0-254, then EOS.
  constexpr int32_t kEos = ::shardlm::testing::kByteVocabularyEos;
  auto tokenizer = Tokenizer::FromJson(::shardlm::testing::ByteVocabularyJson(), "bytes.json");
  ASSERT_THAT(tokenizer, IsOk());
  auto compiler = ConstraintCompiler::Create(**tokenizer, {kEos});
  ASSERT_THAT(compiler, IsOk());
  const std::string kRegex = "(ab|cd)[abcd]{6,30}";
  const std::vector<std::string> kChoices = {"abcabcabcabc", "abcdabcdabcd", "cdcdcdcdcd"};
  auto compile = [&](bool choice) {
    ConstraintSpec spec;
    spec.kind = choice ? ConstraintSpec::Kind::kChoice : ConstraintSpec::Kind::kRegex;
    spec.text = kRegex;
    spec.choices = kChoices;
    auto m = (*compiler)->Compile(spec);
    EXPECT_THAT(m, IsOk());
    return std::shared_ptr<const Matcher>(std::move(*m));
  };
  const std::string dir = ::testing::TempDir() + "/speculation_bytes_model." + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  TinyModelOptions o;
  o.vocab_size = 256;
  o.hidden_size = 64;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.intermediate_size = 128;
  o.max_position_embeddings = 256;
  o.seed = 7;
  ASSERT_THAT(WriteTinyModel(dir, o), IsOk());
  auto target = TinyModels::Load(dir);
  auto draft_worker = TinyModels::Load(dir, 8 << 20);
  ASSERT_NE(target, nullptr);
  ASSERT_NE(draft_worker, nullptr);
  DraftModelProposer draft(draft_worker.get(), static_cast<int32_t>(draft_worker->num_blocks()),
                           static_cast<int32_t>(draft_worker->block_size()), {kEos});
  for (const Proposer proposer : {Proposer::kNgram, Proposer::kDraft}) {
    MetricsRegistry registry;
    ServiceMetrics metrics(&registry);
    Engine::Options plain_options;
    Engine::Options spec_options;
    spec_options.metrics = &metrics;
    spec_options.speculation.method = proposer == Proposer::kNgram
                                          ? Engine::Options::Speculation::Method::kNgram
                                          : Engine::Options::Speculation::Method::kDraft;
    spec_options.speculation.draft = &draft;
    spec_options.speculation.draft_cost = 0.1;
    spec_options.speculation.row_cost = 0.05;
    auto make = [&](const Engine::Options& eo) {
      return std::make_unique<Engine>(target.get(), target->config(),
                                      static_cast<int32_t>(target->num_blocks()),
                                      static_cast<int32_t>(target->block_size()), eo);
    };
    auto plain = make(plain_options);
    auto spec = make(spec_options);
    for (int i = 0; i < 8; ++i) {
      EngineRequest r;
      const std::string prompt = i % 2 == 0 ? "abcdabcdabcdabcd" : "cdcdcdabababcdcd";
      auto ids = (*tokenizer)->Encode(prompt, false);
      ASSERT_THAT(ids, IsOk());
      r.prompt = *ids;
      r.prompt.push_back(i);  // a different request each time
      r.max_new_tokens = 40;
      r.stop_token_ids = {kEos};
      r.sampling.temperature = i < 4 ? 0.0f : 0.8f;
      r.sampling.seed = 100 + i;
      r.has_seed = true;
      r.constraint = compile(i % 4 == 3);
      auto a = EngineRunner(plain.get()).Run(r);
      auto b = EngineRunner(spec.get()).Run(r);
      ASSERT_THAT(a, IsOk());
      ASSERT_THAT(b, IsOk());
      EXPECT_EQ(a->tokens, b->tokens) << "request " << i;
      const std::string text = (*tokenizer)->Decode(b->tokens, /*skip_special=*/true);
      if (i % 4 == 3) {
        EXPECT_THAT(kChoices, ::testing::Contains(text)) << "request " << i;
      } else {
        EXPECT_TRUE(std::regex_match(text, std::regex(kRegex))) << "request " << i << ": '" << text << "'";
      }
    }
    EXPECT_GT(metrics.spec_accepted_tokens->value(), 10)
        << (proposer == Proposer::kNgram ? "ngram" : "draft") << ": constrained sequences should speculate";
  }
  EXPECT_EQ(draft.free_blocks(), draft.num_blocks());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace shardlm
