// The engine over a real single-rank worker on a tiny random checkpoint:
// continuous batching, chunked prefill and preemption must not change any
// output, blocks must all come back, and bad requests get named errors.
#include "coordinator/engine/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include "coordinator/engine/engine_runner.h"
#include "coordinator/engine/service_metrics.h"
#include "formats/tiny_model.h"
#include "tests/testing/status_matchers.h"
#include "worker/rank_worker.h"

namespace shardlm {
namespace {

// Engine options with `tokens` per step, the rest as their defaults.
Engine::Options BatchTokens(int64_t tokens) {
  Engine::Options o;
  o.max_batch_tokens = tokens;
  return o;
}

using ::shardlm::testing::IsOk;
using ::shardlm::testing::StatusIs;
using ::testing::HasSubstr;

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "/engine_test_model." + std::to_string(::getpid()));
    std::filesystem::remove_all(*dir_);
    TinyModelOptions o;
    o.arch = Arch::kQwen3;
    o.vocab_size = 256;
    o.hidden_size = 64;
    o.num_heads = 4;
    o.num_kv_heads = 2;
    o.intermediate_size = 128;
    o.max_position_embeddings = 256;
    o.seed = 42;
    ASSERT_THAT(WriteTinyModel(*dir_, o), IsOk());
  }
  // ctest runs each test in its own process, in parallel: each process has
  // its own copy (rewriting one another's mmapped weights was a SIGBUS).
  static void TearDownTestSuite() { std::filesystem::remove_all(*dir_); }

  // A worker whose KV pool holds `kv_blocks` blocks of 16 tokens.
  std::unique_ptr<RankWorker> Worker(int64_t kv_blocks) {
    RankWorkerOptions o;
    o.model_dir = *dir_;
    // Per block: 2 (K,V) x 2 layers x 16 tokens x 2 kv heads x 16 dims x 4 bytes.
    o.kv_cache_bytes = kv_blocks * 2 * 2 * 16 * 2 * 16 * 4;
    auto w = RankWorker::Load(o, MakeSingleRankCommunicator());
    EXPECT_THAT(w, IsOk());
    return std::move(*w);
  }

  static std::unique_ptr<Engine> MakeEngine(RankWorker* w, int64_t max_batch_tokens) {
    return std::make_unique<Engine>(w, w->config(), static_cast<int32_t>(w->num_blocks()),
                                    static_cast<int32_t>(w->block_size()), BatchTokens(max_batch_tokens));
  }

  static EngineRequest Greedy(std::vector<int32_t> prompt, int32_t n) {
    EngineRequest r;
    r.prompt = std::move(prompt);
    r.max_new_tokens = n;
    r.sampling.temperature = 0.0f;
    r.ignore_eos = true;
    return r;
  }

  static std::vector<int32_t> Prompt(int32_t len, int32_t salt) {
    std::vector<int32_t> p;
    for (int32_t i = 0; i < len; ++i) p.push_back((i * 37 + salt * 11) % 256);
    return p;
  }

  // Request `id`'s result once it finished (Engine::TakeFinished hands each
  // result out once: the others are kept here for later calls).
  std::optional<EngineResult> TakeResult(Engine& e, int64_t id) {
    for (auto& [done, r] : e.TakeFinished()) finished_.emplace(done, std::move(r));
    auto it = finished_.find(id);
    if (it == finished_.end()) return std::nullopt;
    EngineResult r = std::move(it->second);
    finished_.erase(it);
    return r;
  }

  static std::string* dir_;
  std::map<int64_t, EngineResult> finished_;
};
std::string* EngineTest::dir_ = nullptr;

TEST_F(EngineTest, BatchedChunkedAndPreemptedRunsEqualSoloRuns) {
  const std::vector<int32_t> lens = {5, 40, 17, 1, 33};
  std::vector<EngineResult> solo;
  {
    auto w = Worker(64);
    auto e = MakeEngine(w.get(), 2048);
    for (size_t i = 0; i < lens.size(); ++i) {
      auto r = EngineRunner(e.get()).Run(Greedy(Prompt(lens[i], i), 12));
      ASSERT_THAT(r, IsOk());
      solo.push_back(*r);
    }
  }
  // All at once, prompts chunked 24 tokens per step, and a pool so small
  // (5 blocks = 80 tokens for the ~160 all need) that sequences get preempted.
  auto w = Worker(5);
  auto e = MakeEngine(w.get(), 24);
  std::vector<int64_t> ids;
  for (size_t i = 0; i < lens.size(); ++i) {
    auto id = e->Submit(Greedy(Prompt(lens[i], i), 12));
    ASSERT_THAT(id, IsOk());
    ids.push_back(*id);
  }
  while (!e->Idle()) ASSERT_THAT(EngineRunner(e.get()).Step(), IsOk());
  for (size_t i = 0; i < ids.size(); ++i) {
    auto r = TakeResult(*e, ids[i]);
    ASSERT_TRUE(r.has_value());
    ASSERT_THAT(r->status, IsOk());
    EXPECT_EQ(r->tokens, solo[i].tokens) << "request " << i;
    for (size_t t = 0; t < r->logprobs.size(); ++t) EXPECT_NEAR(r->logprobs[t], solo[i].logprobs[t], 1e-4);
  }
  EXPECT_GT(e->stats().preemptions, 0) << "the small pool should have forced preemption";
  EXPECT_GT(e->stats().steps, 12) << "prompts should have been chunked";
  EXPECT_EQ(e->stats().free_blocks, e->stats().num_blocks) << "every KV block is free when idle";
}

TEST_F(EngineTest, ScoresMatchGenerationLogprobs) {
  auto w = Worker(64);
  auto e = MakeEngine(w.get(), 2048);
  auto gen = EngineRunner(e.get()).Run(Greedy(Prompt(9, 3), 6));
  ASSERT_THAT(gen, IsOk());
  EngineRequest score;
  score.prompt = Prompt(9, 3);
  score.prompt.insert(score.prompt.end(), gen->tokens.begin(), gen->tokens.end());
  score.max_new_tokens = 0;
  score.score_prompt = true;
  auto s = EngineRunner(e.get()).Run(score);
  ASSERT_THAT(s, IsOk());
  ASSERT_EQ(s->prompt_scores.size(), 15u);
  EXPECT_FALSE(s->prompt_scores[0].has_value());
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(*s->prompt_scores[9 + i], gen->logprobs[i], 1e-4);
  EXPECT_EQ(e->stats().free_blocks, e->stats().num_blocks);
}

TEST_F(EngineTest, StopTokensAndSeededSampling) {
  auto w = Worker(64);
  auto e = MakeEngine(w.get(), 2048);
  auto greedy = EngineRunner(e.get()).Run(Greedy(Prompt(4, 1), 8));
  ASSERT_THAT(greedy, IsOk());
  EngineRequest stop = Greedy(Prompt(4, 1), 8);
  stop.stop_token_ids = {greedy->tokens[2]};
  auto stopped = EngineRunner(e.get()).Run(stop);
  ASSERT_THAT(stopped, IsOk());
  EXPECT_EQ(stopped->finish_reason, FinishReason::kStop);
  EXPECT_LE(stopped->tokens.size(), 3u);
  EXPECT_EQ(stopped->tokens.back(), greedy->tokens[2]);

  EngineRequest sampled = Greedy(Prompt(4, 1), 16);
  sampled.sampling.temperature = 1.0f;
  sampled.has_seed = true;
  sampled.sampling.seed = 9;
  auto a = EngineRunner(e.get()).Run(sampled), b = EngineRunner(e.get()).Run(sampled);
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(a->tokens, b->tokens);
  sampled.sampling.seed = 10;
  auto c = EngineRunner(e.get()).Run(sampled);
  ASSERT_THAT(c, IsOk());
  EXPECT_NE(a->tokens, c->tokens);
}

TEST_F(EngineTest, InvalidRequestsNameTheFieldAndLimit) {
  auto w = Worker(4);  // 64 tokens of KV
  auto e = MakeEngine(w.get(), 2048);
  EXPECT_THAT(e->Submit(Greedy({}, 1)), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("prompt")));
  EXPECT_THAT(e->Submit(Greedy({1, 256}, 1)), StatusIs(absl::StatusCode::kInvalidArgument,
                                                       HasSubstr("id 256, outside the vocabulary [0, 256)")));
  EXPECT_THAT(
      e->Submit(Greedy({1}, 300)),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("must be <= 256 (the context length). Given: 1 prompt tokens and 300 max_new_tokens")));
  EXPECT_THAT(e->Submit(Greedy({1}, 100)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("64 (the KV cache capacity)")));
  EngineRequest r = Greedy({1}, 1);
  r.sampling.top_p = 0.0f;
  EXPECT_THAT(e->Submit(r),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("top_p must be in (0, 1]")));
  EXPECT_TRUE(e->Idle());
}

// An executor that fails every other call, as a dead worker would.
class FlakyExecutor : public StepExecutor {
 public:
  explicit FlakyExecutor(StepExecutor* real) : real_(real) {}
  absl::StatusOr<std::vector<RowResult>> Execute(const StepInput& step) override {
    if (++calls_ % 2 == 0) return absl::UnavailableError("worker 0 stopped answering");
    return real_->Execute(step);
  }

 private:
  StepExecutor* real_;
  int calls_ = 0;
};

TEST_F(EngineTest, ExecutorFailureFailsWorkInFlightAndFreesBlocks) {
  auto w = Worker(64);
  FlakyExecutor flaky(w.get());
  Engine e(&flaky, w->config(), static_cast<int32_t>(w->num_blocks()), 16, Engine::Options{});
  auto r = EngineRunner(&e).Run(Greedy(Prompt(5, 2), 4));
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("stopped answering")));
  EXPECT_TRUE(e.Idle());
  EXPECT_EQ(e.stats().free_blocks, e.stats().num_blocks);
}

// A request past its deadline (gRPC's, EngineRequest::deadline) is planned
// no more by the engine's own clock: the step already sent finishes, then it
// ends DEADLINE_EXCEEDED with its blocks free, while the others go on. One
// already past it at Submit runs no step at all.
TEST_F(EngineTest, PastItsDeadlineARequestIsPlannedNoMore) {
  auto w = Worker(64);
  auto e = MakeEngine(w.get(), 2048);
  EngineRequest gone = Greedy(Prompt(9, 5), 8);
  gone.deadline = std::chrono::steady_clock::now() - std::chrono::milliseconds(1);
  EXPECT_THAT(EngineRunner(e.get()).Run(gone),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("deadline")));
  EXPECT_EQ(e->stats().steps, 0);

  EngineRequest late = Greedy(Prompt(20, 3), 200);
  late.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  size_t drawn = 0;
  late.on_token = [&drawn](int32_t, float, const std::vector<TopLogprob>&) { ++drawn; };
  auto late_id = e->Submit(late);
  auto other_id = e->Submit(Greedy(Prompt(12, 4), 40));
  ASSERT_THAT(late_id, IsOk());
  ASSERT_THAT(other_id, IsOk());
  {
    EngineRunner runner(e.get());
    for (int i = 0; i < 3; ++i) ASSERT_THAT(runner.StepOverlapped(), IsOk());
    ASSERT_LT(std::chrono::steady_clock::now(), late.deadline) << "three tiny steps took 300 ms";
    const size_t drawn_before = drawn;
    EXPECT_EQ(drawn_before, 3u);
    std::this_thread::sleep_until(late.deadline);
    // Plans the next step without it (and applies the one in flight, with it,
    // where steps overlap).
    ASSERT_THAT(runner.StepOverlapped(), IsOk());
    auto r = TakeResult(*e, *late_id);
    ASSERT_TRUE(r.has_value()) << "ended once the step sent before its deadline was applied";
    EXPECT_THAT(r->status, StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("deadline")));
    EXPECT_EQ(r->tokens.size(), drawn_before + (e->overlaps() ? 1 : 0));
    while (!e->Idle()) ASSERT_THAT(runner.StepOverlapped(), IsOk());
  }
  auto other = TakeResult(*e, *other_id);
  ASSERT_TRUE(other.has_value());
  EXPECT_THAT(other->status, IsOk());
  EXPECT_EQ(other->tokens.size(), 40u);
  EXPECT_EQ(e->stats().free_blocks, e->stats().num_blocks);
}

}  // namespace
}  // namespace shardlm

namespace shardlm {
namespace {

class EnginePrefixTest : public EngineTest {};

TEST_F(EnginePrefixTest, PrefixCacheHitGivesTheSameOutput) {
  auto w = Worker(64);
  auto e = MakeEngine(w.get(), 2048);
  auto cold = EngineRunner(e.get()).Run(Greedy(Prompt(50, 4), 8));  // 3 full blocks + 2 tokens
  ASSERT_THAT(cold, IsOk());
  EXPECT_EQ(cold->cached_tokens, 0);
  EXPECT_EQ(e->stats().cached_blocks, 3) << "the prompt's full blocks stay cached";
  auto warm = EngineRunner(e.get()).Run(Greedy(Prompt(50, 4), 8));
  ASSERT_THAT(warm, IsOk());
  EXPECT_EQ(warm->cached_tokens, 48) << "three full blocks reused";
  EXPECT_EQ(warm->tokens, cold->tokens);
  for (size_t i = 0; i < cold->logprobs.size(); ++i) EXPECT_NEAR(warm->logprobs[i], cold->logprobs[i], 1e-5);
  EXPECT_GT(e->stats().prefix_cache_hits, 0);
  EXPECT_EQ(e->stats().referenced_blocks, 0) << "cached blocks are evictable, not held";
}

TEST_F(EnginePrefixTest, MetricsCountTokensLatenciesPrefixHitsAndPreemptions) {
  MetricsRegistry registry;
  ServiceMetrics m(&registry);
  auto w = Worker(5);  // 80 tokens of KV: three requests of ~60 preempt each other
  Engine::Options o;
  o.max_batch_tokens = 24;
  o.metrics = &m;
  Engine e(w.get(), w->config(), static_cast<int32_t>(w->num_blocks()), 16, o);
  ASSERT_THAT(EngineRunner(&e).Run(Greedy(Prompt(40, 9), 4)), IsOk());
  EXPECT_EQ(m.prompt_tokens->value(), 40);
  EXPECT_EQ(m.generation_tokens->value(), 4);
  EXPECT_EQ(m.time_to_first_token->snapshot().count, 1u);
  EXPECT_EQ(m.time_per_output_token->snapshot().count, 1u);
  EXPECT_EQ(m.prefix_cache_hits->value(), 0);
  EXPECT_EQ(m.kv_blocks_used->value(), 0);
  EXPECT_EQ(m.kv_blocks_cached->value() + m.kv_blocks_free->value(), 5);
  ASSERT_THAT(EngineRunner(&e).Run(Greedy(Prompt(40, 9), 4)), IsOk());  // two full blocks from the cache
  EXPECT_EQ(m.prefix_cache_hits->value(), 32);
  EXPECT_EQ(m.prefix_cache_queries->value(), 80);
  std::vector<int64_t> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(*e.Submit(Greedy(Prompt(44, 20 + i), 16)));
  EXPECT_EQ(m.requests_waiting->value(), 3);
  EXPECT_EQ(m.requests_running->value(), 0);
  ASSERT_THAT(EngineRunner(&e).Step(), IsOk());
  EXPECT_GE(m.requests_running->value(), 1);
  EXPECT_EQ(m.requests_running->value() + m.requests_waiting->value(), 3);
  while (!e.Idle()) ASSERT_THAT(EngineRunner(&e).Step(), IsOk());
  EXPECT_GT(m.preemptions->value(), 0);
  // Looked up once per request, not again after a preemption or a step without room.
  EXPECT_EQ(m.prefix_cache_queries->value(), 80 + 3 * 44);
  EXPECT_EQ(m.prefix_cache_hits->value(), 32);
  EXPECT_EQ(m.prompt_tokens->value(), 80 + 3 * 44);
  EXPECT_EQ(m.generation_tokens->value(), 4 + 4 + 3 * 16);
  EXPECT_EQ(m.time_to_first_token->snapshot().count, 5u);
  EXPECT_EQ(m.steps->value(), e.stats().steps);
  EXPECT_EQ(m.requests_running->value() + m.requests_waiting->value(), 0);
  EXPECT_EQ(m.kv_blocks_used->value(), 0);
}

TEST_F(EnginePrefixTest, HandlePrefixEqualsTheColdComputation) {
  auto w = Worker(64);
  Engine::Options o;
  o.prefix_caching = false;  // only the handle may supply KV here
  Engine e(w.get(), w->config(), static_cast<int32_t>(w->num_blocks()), 16, o);
  const std::vector<int32_t> prefix = Prompt(21, 5), suffix = Prompt(7, 6);  // 21: a partial block
  // Prefill the prefix and keep its KV.
  EngineRequest pre;
  pre.prompt = prefix;
  pre.max_new_tokens = 0;
  pre.score_prompt = true;
  pre.next_top = true;
  pre.sampling.num_top_logprobs = 3;
  pre.keep_handle = true;
  auto pr = EngineRunner(&e).Run(pre);
  ASSERT_THAT(pr, IsOk());
  ASSERT_FALSE(pr->handle.empty());
  ASSERT_EQ(pr->next_top.size(), 3u);
  // Continue from the handle twice: score the suffix, then generate.
  EngineRequest cont = Greedy(suffix, 6);
  cont.prefix_handle = pr->handle;
  cont.score_prompt = true;
  auto warm = EngineRunner(&e).Run(cont);
  ASSERT_THAT(warm, IsOk());
  EXPECT_EQ(warm->prefix_tokens, 21);
  EXPECT_EQ(warm->cached_tokens, 20) << "all but the last prefix token, which is recomputed";
  // Cold: the whole text at once.
  std::vector<int32_t> whole = prefix;
  whole.insert(whole.end(), suffix.begin(), suffix.end());
  EngineRequest cold_req = Greedy(whole, 6);
  cold_req.score_prompt = true;
  cold_req.sampling.num_top_logprobs = 3;
  auto cold = EngineRunner(&e).Run(cold_req);
  ASSERT_THAT(cold, IsOk());
  EXPECT_EQ(warm->tokens, cold->tokens);
  for (size_t i = 0; i < suffix.size(); ++i) {
    ASSERT_TRUE(warm->prompt_scores[i].has_value()) << i;
    EXPECT_NEAR(*warm->prompt_scores[i], *cold->prompt_scores[prefix.size() + i], 1e-4) << i;
  }
  // The handle's next-token top-1 is the cold run's score distribution at that point.
  const std::vector<TopLogprob>& cold_top = cold->prompt_top[prefix.size()];
  ASSERT_EQ(cold_top.size(), 3u);
  for (size_t j = 0; j < 3; ++j) {
    EXPECT_EQ(pr->next_top[j].id, cold_top[j].id) << j;
    EXPECT_NEAR(pr->next_top[j].logprob, cold_top[j].logprob, 1e-4) << j;
  }
  // Releasing the handle frees everything; a released handle is NotFound.
  ASSERT_THAT(e.ReleaseHandle(pr->handle), IsOk());
  EXPECT_THAT(e.ReleaseHandle(pr->handle), StatusIs(absl::StatusCode::kNotFound, HasSubstr("unknown")));
  EngineRequest again = Greedy(suffix, 1);
  again.prefix_handle = pr->handle;
  EXPECT_THAT(e.Submit(again), StatusIs(absl::StatusCode::kNotFound, HasSubstr("prefix handle")));
  EXPECT_EQ(e.stats().referenced_blocks, 0);
  EXPECT_EQ(e.stats().free_blocks, e.stats().num_blocks);
}

TEST_F(EnginePrefixTest, ManySamplesShareOnePrefixAndHandlesExpire) {
  auto w = Worker(64);
  Engine::Options o;
  o.handle_ttl_ms = 200;
  Engine e(w.get(), w->config(), static_cast<int32_t>(w->num_blocks()), 16, o);
  EngineRequest pre;
  pre.prompt = Prompt(37, 8);
  pre.max_new_tokens = 0;
  pre.keep_handle = true;
  auto pr = EngineRunner(&e).Run(pre);
  ASSERT_THAT(pr, IsOk());
  const int32_t held = e.stats().referenced_blocks;
  EXPECT_EQ(held, 3);
  // Four samples at once from the same handle: full blocks shared, the tail copied.
  std::vector<int64_t> ids;
  for (int s = 0; s < 4; ++s) {
    EngineRequest g = Greedy({}, 5);
    g.prefix_handle = pr->handle;
    g.sampling.temperature = 0.7f;
    g.has_seed = true;
    g.sampling.seed = s;
    auto id = e.Submit(g);
    ASSERT_THAT(id, IsOk());
    ids.push_back(*id);
  }
  ASSERT_THAT(EngineRunner(&e).Step(), IsOk());
  EXPECT_LE(e.stats().referenced_blocks, held + 4) << "each sample owns one copied block, not a whole prefix";
  while (!e.Idle()) ASSERT_THAT(EngineRunner(&e).Step(), IsOk());
  for (int64_t id : ids) {
    auto r = TakeResult(e, id);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->tokens.size(), 5u);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  EngineRequest later = Greedy({1}, 1);
  later.prefix_handle = pr->handle;
  EXPECT_THAT(e.Submit(later), StatusIs(absl::StatusCode::kNotFound, HasSubstr("expired")));
  ASSERT_THAT(EngineRunner(&e).Run(Greedy({1, 2}, 1)), IsOk());  // a step sweeps expired handles
  EXPECT_EQ(e.stats().handles, 0);
  EXPECT_EQ(e.stats().referenced_blocks, 0);
}

}  // namespace
}  // namespace shardlm

namespace shardlm {
namespace {

TEST_F(EnginePrefixTest, StopEndsARequestAndKeepsItsHandle) {
  auto w = Worker(64);
  auto e = MakeEngine(w.get(), 2048);
  EngineRequest r = Greedy(Prompt(20, 9), 50);
  r.keep_handle = true;
  auto id = e->Submit(r);
  ASSERT_THAT(id, IsOk());
  for (int i = 0; i < 4; ++i) ASSERT_THAT(EngineRunner(e.get()).Step(), IsOk());
  EXPECT_TRUE(e->Stop(*id));
  EXPECT_FALSE(e->Stop(*id)) << "no longer running";
  auto result = TakeResult(*e, *id);
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->finish_reason, FinishReason::kStop);
  EXPECT_EQ(result->tokens.size(), 4u);
  ASSERT_FALSE(result->handle.empty());
  // The handle continues the text as the cold computation would.
  EngineRequest cont = Greedy({}, 3);
  cont.prefix_handle = result->handle;
  auto warm = EngineRunner(e.get()).Run(cont);
  ASSERT_THAT(warm, IsOk());
  std::vector<int32_t> whole = Prompt(20, 9);
  whole.insert(whole.end(), result->tokens.begin(), result->tokens.end());
  auto cold = EngineRunner(e.get()).Run(Greedy(whole, 3));
  ASSERT_THAT(cold, IsOk());
  EXPECT_EQ(warm->tokens, cold->tokens);
  ASSERT_THAT(e->ReleaseHandle(result->handle), IsOk());
  EXPECT_EQ(e->stats().referenced_blocks, 0);
}

// Handles belong to the owner (API key) that made them: to anyone else they
// are NOT_FOUND, exactly like an unknown handle, and cannot be released.
TEST_F(EnginePrefixTest, HandlesAreVisibleToTheirOwnerOnly) {
  auto w = Worker(64);
  auto e = MakeEngine(w.get(), 2048);
  EngineRequest pre = Greedy(Prompt(20, 3), 0);
  pre.owner = "key-a";
  pre.keep_handle = true;
  auto pr = EngineRunner(e.get()).Run(pre);
  ASSERT_THAT(pr, IsOk());
  ASSERT_EQ(pr->handle.size(), 32u);
  EngineRequest other = Greedy(Prompt(3, 4), 2);
  other.prefix_handle = pr->handle;
  other.owner = "key-b";
  EXPECT_THAT(e->Submit(other), StatusIs(absl::StatusCode::kNotFound, HasSubstr("unknown")));
  EXPECT_THAT(e->ReleaseHandle(pr->handle, "key-b"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("unknown")));
  other.owner = "key-a";
  EXPECT_THAT(EngineRunner(e.get()).Run(other), IsOk());
  EXPECT_THAT(e->ReleaseHandle(pr->handle, "key-a"), IsOk());
  EXPECT_EQ(e->stats().referenced_blocks, 0);
}

// After the group is formed again the engine starts over: running requests
// end with the given status, old handles are NOT_FOUND saying why, every
// block is free, and new requests run on the new pool.
TEST_F(EnginePrefixTest, ResetDropsHandlesAndSaysWhy) {
  auto w = Worker(64);
  auto e = MakeEngine(w.get(), 2048);
  EngineRequest pre = Greedy(Prompt(20, 3), 0);
  pre.keep_handle = true;
  auto pr = EngineRunner(e.get()).Run(pre);
  ASSERT_THAT(pr, IsOk());
  auto running = e->Submit(Greedy(Prompt(10, 5), 8));
  ASSERT_THAT(running, IsOk());
  e->FailAll(absl::UnavailableError("rank 1 is unreachable"));
  auto failed = TakeResult(*e, *running);
  ASSERT_TRUE(failed.has_value());
  EXPECT_THAT(failed->status, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 1")));
  e->Reset(static_cast<int32_t>(w->num_blocks()), "the group of epoch 1 failed");
  EngineRequest cont = Greedy(Prompt(3, 4), 2);
  cont.prefix_handle = pr->handle;
  EXPECT_THAT(e->Submit(cont),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("was lost: the group of epoch 1")));
  EXPECT_EQ(e->stats().referenced_blocks, 0);
  EXPECT_EQ(e->stats().free_blocks, e->stats().num_blocks);
  EXPECT_THAT(EngineRunner(e.get()).Run(Greedy(Prompt(10, 5), 4)), IsOk());
}

// Untrusted handles are echoed bounded.
TEST_F(EnginePrefixTest, LongUnknownHandlesAreEchoedBounded) {
  auto w = Worker(16);
  auto e = MakeEngine(w.get(), 2048);
  absl::Status st = e->ReleaseHandle(std::string(10000, 'h'));
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kNotFound, HasSubstr("(10000 bytes)")));
  EXPECT_LT(st.message().size(), 200u);
}

}  // namespace
}  // namespace shardlm
