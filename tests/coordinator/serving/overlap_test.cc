// Overlapped steps (docs/scheduler.md): the engine loop queues step N+1 on the
// workers before step N's tokens are back, and the worker fills in the tokens
// it sampled. Driven through the real EngineLoop over a real rank worker that
// runs steps on its own thread, in the order sent, from the bytes a worker
// process would receive (encoded and decoded by the step codec). Every output
// must equal the step-by-step engine's, with EOS-like stops, penalties,
// seeded sampling, preemption, cancellation, Stop and kept handles mixed in,
// and every block must come back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <regex>
#include <thread>

#include "constraints/constraint_compiler.h"
#include "coordinator/engine/engine.h"
#include "coordinator/engine/engine_runner.h"
#include "coordinator/serving/engine_loop.h"
#include "formats/tiny_model.h"
#include "proto/step_codec.h"
#include "step/step_masks.h"
#include "tests/testing/byte_vocabulary.h"
#include "tests/testing/status_matchers.h"
#include "tokenizer/tokenizer.h"
#include "worker/rank_worker.h"

namespace shardlm {
namespace {

using ::shardlm::testing::IsOk;
using Rows = absl::StatusOr<std::vector<RowResult>>;

// A worker process without the process: StartStep snapshots the step through
// the codec (as the wire does) and a thread runs the steps in order.
class QueuedWorker final : public StepExecutor {
 public:
  // fail_step: that step (counting from 1) fails without running, as a rank that refuses it.
  explicit QueuedWorker(RankWorker* worker, uint64_t fail_step = 0)
      : worker_(worker), fail_step_(fail_step), thread_([this] { Loop(); }) {}
  ~QueuedWorker() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  bool Overlaps() const override { return true; }
  absl::StatusOr<std::vector<RowResult>> Execute(const StepInput& step) override {
    return StartStep(step)->Wait();
  }
  std::unique_ptr<PendingStep> StartStep(const StepInput& step) override {
    class Waiting final : public PendingStep {
     public:
      Waiting(std::future<Rows> f, MaskMailbox* mailbox, uint64_t id)
          : f_(std::move(f)), mailbox_(mailbox), id_(id) {}
      Rows Wait() override { return f_.get(); }
      void SendMasks(std::vector<RowMask> masks) override { mailbox_->Put({0, id_}, std::move(masks)); }

     private:
      std::future<Rows> f_;
      MaskMailbox* mailbox_;
      uint64_t id_;
    };
    const ModelConfig& cfg = worker_->config();
    StepLimits limits{cfg.vocab_size, worker_->num_blocks(), worker_->block_size(),
                      cfg.max_position_embeddings};
    const uint64_t id = ++sent_;
    auto decoded = DecodeStep(EncodeStep(step, id, id - 1), limits);
    std::promise<Rows> promise;
    std::future<Rows> future = promise.get_future();
    if (!decoded.ok()) {
      promise.set_value(decoded.status());
      return std::make_unique<Waiting>(std::move(future), &masks_, id);
    }
    if (MasksFollow((*decoded)->step)) {
      ++masked_later_steps_;
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      (*decoded)->step.await_masks = AwaitMasks(
          &masks_, {0, id}, cfg.vocab_size, [give_up] { return std::chrono::steady_clock::now() > give_up; });
    }
    if (!step.feedback.empty()) ++fed_back_steps_;
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back({std::move(*decoded), std::move(promise), id == fail_step_});
    }
    cv_.notify_all();
    return std::make_unique<Waiting>(std::move(future), &masks_, id);
  }
  int fed_back_steps() const { return fed_back_steps_; }
  // Steps whose constraint masks followed them (sent while they ran).
  int masked_later_steps() const { return masked_later_steps_; }

 private:
  struct Job {
    std::unique_ptr<DecodedStep> step;
    std::promise<Rows> done;
    bool fail = false;
  };
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      Job job = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      // A little slower than planning, as a real step is: the next step is
      // planned and queued while this one runs.
      std::this_thread::sleep_for(std::chrono::microseconds(300));
      if (job.fail) {
        worker_->ForgetSampled();
        job.done.set_value(absl::UnavailableError("rank 0 refused the step"));
      } else {
        job.done.set_value(worker_->Execute(job.step->step));
      }
      lock.lock();
    }
  }

  RankWorker* worker_;
  uint64_t fail_step_;
  uint64_t sent_ = 0;
  int fed_back_steps_ = 0;
  int masked_later_steps_ = 0;
  MaskMailbox masks_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stop_ = false;
  std::thread thread_;
};

class OverlapTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "/overlap_test_model." + std::to_string(::getpid()));
    std::filesystem::remove_all(*dir_);
    TinyModelOptions o;
    o.vocab_size = 256;
    o.hidden_size = 64;
    o.num_heads = 4;
    o.num_kv_heads = 2;
    o.intermediate_size = 128;
    o.max_position_embeddings = 256;
    o.seed = 7;
    ASSERT_THAT(WriteTinyModel(*dir_, o), IsOk());
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(*dir_); }

  std::unique_ptr<RankWorker> Worker(int64_t kv_blocks) {
    RankWorkerOptions o;
    o.model_dir = *dir_;
    // Per block: 2 (K,V) x 2 layers x 16 tokens x 2 kv heads x 16 dims x 4 bytes.
    o.kv_cache_bytes = kv_blocks * 2 * 2 * 16 * 2 * 16 * 4;
    auto w = RankWorker::Load(o, MakeSingleRankCommunicator());
    EXPECT_THAT(w, IsOk());
    return std::move(*w);
  }

  // Request i of the mix: prompts of 1-40 tokens, greedy and seeded
  // sampling, penalties, and stop tokens taken from the solo run (set later).
  static EngineRequest Request(int i) {
    EngineRequest r;
    for (int k = 0; k < 1 + (i * 13) % 40; ++k) r.prompt.push_back((k * 31 + i * 17) % 256);
    r.max_new_tokens = 3 + (i * 7) % 14;
    r.ignore_eos = true;
    r.sampling.temperature = 0.0f;
    if (i % 3 == 1) {
      r.sampling.temperature = 0.9f;
      r.has_seed = true;
      r.sampling.seed = 100 + i;
    }
    if (i % 4 == 2) {
      r.sampling.repetition_penalty = 1.3f;
      r.sampling.presence_penalty = 0.4f;
      r.sampling.frequency_penalty = 0.2f;
    }
    return r;
  }

  static std::string* dir_;
};
std::string* OverlapTest::dir_ = nullptr;

struct Outcome {
  std::mutex mu;
  std::condition_variable cv;
  std::map<int, EngineResult> results;
};

TEST_F(OverlapTest, OverlappedStepsEqualStepByStepWithStopsCancelsAndPreemption) {
  constexpr int kRequests = 24;
  // Step by step, one request at a time.
  std::vector<EngineRequest> requests;
  std::vector<EngineResult> solo;
  {
    auto w = Worker(64);
    Engine e(w.get(), w->config(), static_cast<int32_t>(w->num_blocks()),
             static_cast<int32_t>(w->block_size()), Engine::Options{});
    for (int i = 0; i < kRequests; ++i) {
      EngineRequest r = Request(i);
      auto first = EngineRunner(&e).Run(r);
      ASSERT_THAT(first, IsOk());
      // Every 5th stops at a token its run produces (an EOS the engine cannot foresee).
      if (i % 5 == 0 && first->tokens.size() > 3) {
        r.stop_token_ids = {first->tokens[first->tokens.size() / 2]};
        first = EngineRunner(&e).Run(r);
        ASSERT_THAT(first, IsOk());
        ASSERT_EQ(first->finish_reason, FinishReason::kStop);
      }
      requests.push_back(r);
      solo.push_back(*first);
    }
  }

  // All at once through the loop, steps overlapped, in a pool too small for
  // all of them (preemption), with every 7th cancelled after its 2nd token.
  auto w = Worker(10);
  QueuedWorker exec(w.get());
  Engine::Options opts;
  opts.max_batch_tokens = 48;
  auto engine = std::make_unique<Engine>(&exec, w->config(), static_cast<int32_t>(w->num_blocks()),
                                         static_cast<int32_t>(w->block_size()), opts);
  ASSERT_TRUE(engine->overlaps());
  Outcome out;
  {
    EngineLoop loop(std::move(engine));
    std::vector<int64_t> ids(kRequests, -1);
    std::mutex ids_mu;
    for (int i = 0; i < kRequests; ++i) {
      EngineRequest r = requests[i];
      if (i % 7 == 3) {
        auto seen = std::make_shared<int>(0);
        r.on_token = [&, i, seen](int32_t, float, const std::vector<TopLogprob>&) {
          if (++*seen != 2) return;
          std::lock_guard<std::mutex> lock(ids_mu);
          loop.Cancel(ids[i]);
        };
      }
      std::lock_guard<std::mutex> lock(ids_mu);
      auto id = loop.Submit(std::move(r), [&out, i](EngineResult res) {
        std::lock_guard<std::mutex> lock(out.mu);
        out.results[i] = std::move(res);
        out.cv.notify_all();
      });
      ASSERT_THAT(id, IsOk());
      ids[i] = *id;
    }
    std::unique_lock<std::mutex> lock(out.mu);
    ASSERT_TRUE(out.cv.wait_for(lock, std::chrono::seconds(120),
                                [&] { return static_cast<int>(out.results.size()) == kRequests; }));
    lock.unlock();
    EXPECT_EQ(loop.num_free_blocks(), loop.num_blocks()) << "every KV block is free when idle";
    EXPECT_EQ(loop.pending(), 0);
    Engine::Stats st = loop.stats();
    EXPECT_EQ(st.running + st.waiting, 0);
  }
  EXPECT_GT(exec.fed_back_steps(), 10) << "steps should have been queued behind running ones";
  for (int i = 0; i < kRequests; ++i) {
    const EngineResult& r = out.results[i];
    if (i % 7 == 3 && solo[i].tokens.size() > 2) {
      EXPECT_EQ(r.status.code(), absl::StatusCode::kCancelled) << "request " << i;
      continue;
    }
    ASSERT_THAT(r.status, IsOk()) << "request " << i;
    EXPECT_EQ(r.tokens, solo[i].tokens) << "request " << i;
    EXPECT_EQ(r.finish_reason, solo[i].finish_reason) << "request " << i;
    ASSERT_EQ(r.logprobs.size(), solo[i].logprobs.size());
    for (size_t t = 0; t < r.logprobs.size(); ++t) EXPECT_NEAR(r.logprobs[t], solo[i].logprobs[t], 1e-4);
  }
}

TEST_F(OverlapTest, AStoppedRequestKeepsAHandleThatContinuesLikeTheColdRun) {
  auto w = Worker(64);
  QueuedWorker exec(w.get());
  auto engine = std::make_unique<Engine>(&exec, w->config(), static_cast<int32_t>(w->num_blocks()),
                                         static_cast<int32_t>(w->block_size()), Engine::Options{});
  EngineLoop loop(std::move(engine));
  auto run = [&](EngineRequest r, std::function<void(int64_t, int)> on_token = nullptr) {
    auto done = std::make_shared<std::promise<EngineResult>>();
    auto f = done->get_future();
    auto id_box = std::make_shared<int64_t>(-1);
    auto count = std::make_shared<int>(0);
    auto id_mu = std::make_shared<std::mutex>();
    if (on_token) {
      r.on_token = [=](int32_t, float, const std::vector<TopLogprob>&) {
        std::lock_guard<std::mutex> lock(*id_mu);
        on_token(*id_box, ++*count);
      };
    }
    std::lock_guard<std::mutex> lock(*id_mu);
    auto id = loop.Submit(std::move(r), [done](EngineResult res) { done->set_value(std::move(res)); });
    EXPECT_THAT(id, IsOk());
    *id_box = *id;
    return f;
  };
  // Stopped (as a stop string would) after its 4th token while its next
  // step is already queued: the handle covers exactly the tokens returned.
  EngineRequest first = Request(0);
  first.max_new_tokens = 20;
  first.keep_handle = true;
  auto stopped_future = run(first, [&](int64_t id, int n) {
    if (n == 4) loop.Stop(id);
  });
  EngineResult stopped = stopped_future.get();
  ASSERT_THAT(stopped.status, IsOk());
  ASSERT_FALSE(stopped.handle.empty());
  ASSERT_EQ(stopped.tokens.size(), 4u);

  EngineRequest cont;
  cont.prefix_handle = stopped.handle;
  cont.prompt = {5, 6, 7};
  cont.max_new_tokens = 6;
  cont.ignore_eos = true;
  cont.sampling.temperature = 0.0f;
  EngineResult warm = run(cont).get();
  ASSERT_THAT(warm.status, IsOk());

  EngineRequest cold = cont;
  cold.prefix_handle.clear();
  cold.prompt = first.prompt;
  cold.prompt.insert(cold.prompt.end(), stopped.tokens.begin(), stopped.tokens.end());
  cold.prompt.insert(cold.prompt.end(), {5, 6, 7});
  EngineResult fresh = run(cold).get();
  ASSERT_THAT(fresh.status, IsOk());
  EXPECT_EQ(warm.tokens, fresh.tokens);
  ASSERT_THAT(loop.ReleaseHandle(stopped.handle), IsOk());
  EXPECT_EQ(loop.num_free_blocks(), loop.num_blocks());
}

TEST_F(OverlapTest, AFailedStepWithOneQueuedBehindItFailsItsRequestsAndLeaksNothing) {
  // Solo outputs, step by step.
  std::vector<EngineResult> solo;
  {
    auto w = Worker(64);
    Engine e(w.get(), w->config(), static_cast<int32_t>(w->num_blocks()),
             static_cast<int32_t>(w->block_size()), Engine::Options{});
    for (int i = 0; i < 6; ++i) {
      EngineRequest r = Request(3 * i);
      r.max_new_tokens = 12;
      auto res = EngineRunner(&e).Run(r);
      ASSERT_THAT(res, IsOk());
      solo.push_back(*res);
    }
  }
  // Prompts of 16 tokens or more, so that full blocks would be published.
  auto w = Worker(64);
  QueuedWorker exec(w.get(), /*fail_step=*/5);
  auto engine = std::make_unique<Engine>(&exec, w->config(), static_cast<int32_t>(w->num_blocks()),
                                         static_cast<int32_t>(w->block_size()), Engine::Options{});
  EngineLoop loop(std::move(engine));
  auto run_all = [&] {
    Outcome out;
    for (int i = 0; i < 6; ++i) {
      EngineRequest r = Request(3 * i);
      r.max_new_tokens = 12;
      auto id = loop.Submit(std::move(r), [&out, i](EngineResult res) {
        std::lock_guard<std::mutex> lock(out.mu);
        out.results[i] = std::move(res);
        out.cv.notify_all();
      });
      EXPECT_THAT(id, IsOk());
    }
    std::unique_lock<std::mutex> lock(out.mu);
    EXPECT_TRUE(out.cv.wait_for(lock, std::chrono::seconds(60), [&] { return out.results.size() == 6; }));
    return std::move(out.results);
  };
  std::map<int, EngineResult> first = run_all();
  int failed = 0;
  for (auto& [i, r] : first) {
    if (r.status.ok()) {
      EXPECT_EQ(r.tokens, solo[i].tokens) << "request " << i;
    } else {
      EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
      ++failed;
    }
  }
  EXPECT_GT(failed, 0) << "step 5 should have failed the requests in it";
  EXPECT_EQ(loop.num_free_blocks(), loop.num_blocks()) << "every KV block is free after the failure";
  // Nothing the failed step left unwritten reached the prefix cache: the
  // same requests again (cache hits included) equal the solo runs.
  std::map<int, EngineResult> again = run_all();
  for (auto& [i, r] : again) {
    ASSERT_THAT(r.status, IsOk());
    EXPECT_EQ(r.tokens, solo[i].tokens) << "request " << i;
  }
  EXPECT_EQ(loop.num_free_blocks(), loop.num_blocks());
}

TEST_F(OverlapTest, BadFeedbackIsRefusedNamingWhy) {
  auto w = Worker(8);
  const ModelConfig& cfg = w->config();
  StepLimits limits{cfg.vocab_size, w->num_blocks(), w->block_size(), cfg.max_position_embeddings};
  StepInput step;
  step.token_ids = {1, 0};
  step.positions = {0, 1};
  step.seq_of_token = {0, 0};
  step.block_tables = {{0}};
  step.feedback = {{1, 0}};
  // Feedback names the step it comes from.
  EXPECT_THAT(DecodeStep(EncodeStep(step, 2, 0), limits).status(),
              ::shardlm::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                           ::testing::HasSubstr("after_step_id")));
  step.feedback = {{2, 0}};
  EXPECT_THAT(DecodeStep(EncodeStep(step, 2, 1), limits).status(),
              ::shardlm::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                           ::testing::HasSubstr("outside the step's 2 tokens")));
  // A row of the previous step that sampled nothing (here: there was none).
  step.feedback = {{1, 0}};
  auto decoded = DecodeStep(EncodeStep(step, 2, 1), limits);
  ASSERT_THAT(decoded, IsOk());
  EXPECT_THAT(
      w->Execute((*decoded)->step).status(),
      ::shardlm::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                   ::testing::HasSubstr("row 0 of the previous step sampled no token")));
}

// Constrained requests overlap like the rest: a step is queued behind the one
// running, and its constrained rows' masks follow it once the token before is
// back (step/step_masks.h). Every output equals the step-by-step engine's
// (where each mask is known when its step is planned) and keeps to its
// constraint; the unconstrained requests beside them are unchanged.
TEST_F(OverlapTest, ConstrainedRequestsOverlapWithMasksThatFollowTheirStep) {
  // A byte-level vocabulary over the tiny model's 256 ids: bytes 0-254, then EOS.
  constexpr int32_t kEos = ::shardlm::testing::kByteVocabularyEos;
  auto tokenizer = Tokenizer::FromJson(::shardlm::testing::ByteVocabularyJson(), "bytes.json");
  ASSERT_THAT(tokenizer, IsOk());
  auto compiler = ConstraintCompiler::Create(**tokenizer, {kEos});
  ASSERT_THAT(compiler, IsOk());
  const std::string kRegex = "[a-z]{2,5}( [a-z]{2,5}){1,3}";
  const std::vector<std::string> kChoices = {"alpha", "beta", "gamma delta"};
  auto compile = [&](ConstraintSpec::Kind kind) {
    ConstraintSpec spec;
    spec.kind = kind;
    spec.text = kRegex;
    if (kind == ConstraintSpec::Kind::kChoice) spec.choices = kChoices;
    auto m = (*compiler)->Compile(spec);
    EXPECT_THAT(m, IsOk());
    return std::shared_ptr<const Matcher>(std::move(*m));
  };
  constexpr int kRequests = 12;
  std::vector<EngineRequest> requests;
  for (int i = 0; i < kRequests; ++i) {
    EngineRequest r = Request(i);
    r.max_new_tokens = 24;
    r.ignore_eos = false;
    r.stop_token_ids = {kEos};
    if (i % 3 == 0) r.constraint = compile(ConstraintSpec::Kind::kRegex);
    if (i % 3 == 1) r.constraint = compile(ConstraintSpec::Kind::kChoice);
    requests.push_back(r);
  }
  std::vector<EngineResult> solo;
  {
    auto w = Worker(64);
    Engine e(w.get(), w->config(), static_cast<int32_t>(w->num_blocks()),
             static_cast<int32_t>(w->block_size()), Engine::Options{});
    for (const EngineRequest& r : requests) {
      auto one = EngineRunner(&e).Run(r);
      ASSERT_THAT(one, IsOk());
      solo.push_back(*one);
    }
  }
  auto w = Worker(64);
  QueuedWorker exec(w.get());
  auto engine = std::make_unique<Engine>(&exec, w->config(), static_cast<int32_t>(w->num_blocks()),
                                         static_cast<int32_t>(w->block_size()), Engine::Options{});
  Outcome out;
  {
    EngineLoop loop(std::move(engine));
    for (int i = 0; i < kRequests; ++i) {
      auto id = loop.Submit(requests[i], [&out, i](EngineResult res) {
        std::lock_guard<std::mutex> lock(out.mu);
        out.results[i] = std::move(res);
        out.cv.notify_all();
      });
      ASSERT_THAT(id, IsOk());
    }
    std::unique_lock<std::mutex> lock(out.mu);
    ASSERT_TRUE(out.cv.wait_for(lock, std::chrono::seconds(120),
                                [&] { return static_cast<int>(out.results.size()) == kRequests; }));
    lock.unlock();
    EXPECT_EQ(loop.num_free_blocks(), loop.num_blocks()) << "every KV block is free when idle";
  }
  EXPECT_GT(exec.masked_later_steps(), 5)
      << "constrained rows should have had masks that followed their step";
  EXPECT_GT(exec.fed_back_steps(), 15) << "decoding sequences should take every step behind the one running";
  for (int i = 0; i < kRequests; ++i) {
    const EngineResult& r = out.results[i];
    ASSERT_THAT(r.status, IsOk()) << "request " << i;
    EXPECT_EQ(r.tokens, solo[i].tokens) << "request " << i;
    EXPECT_EQ(r.finish_reason, solo[i].finish_reason) << "request " << i;
    if (i % 3 == 2) continue;
    const std::string text = (*tokenizer)->Decode(r.tokens, /*skip_special=*/true);
    if (i % 3 == 0) {
      EXPECT_TRUE(std::regex_match(text, std::regex(kRegex))) << "request " << i << ": '" << text << "'";
    } else {
      EXPECT_THAT(kChoices, ::testing::Contains(text)) << "request " << i;
    }
    EXPECT_EQ(r.finish_reason, FinishReason::kStop) << "request " << i << ": the constraint ends it";
  }
}

// A mask that follows its step fills exactly the rows waiting for one; a
// mask for another row, a missing one or one too wide is refused.
TEST(StepMasksTest, MasksFillOnlyTheRowsThatWaitForThem) {
  std::vector<SampleRow> rows(3);
  rows[0].sample = rows[1].sample = rows[2].sample = true;
  rows[1].mask_follows = true;
  std::vector<RowMask> masks = {{1, {0x5u}}};
  ASSERT_THAT(PointRowsAtMasks(masks, 64, rows), IsOk());
  EXPECT_EQ(rows[0].allowed, nullptr);
  ASSERT_NE(rows[1].allowed, nullptr);
  EXPECT_TRUE(Allowed(rows[1], 0));
  EXPECT_FALSE(Allowed(rows[1], 1));
  EXPECT_TRUE(Allowed(rows[1], 2));
  using ::shardlm::testing::StatusIs;
  using ::testing::HasSubstr;
  std::vector<RowMask> wrong_row = {{0, {1u}}};
  EXPECT_THAT(PointRowsAtMasks(wrong_row, 64, rows),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("does not wait for a mask")));
  EXPECT_THAT(PointRowsAtMasks({}, 64, rows),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("none for row 1")));
  std::vector<RowMask> wide = {{1, {1u, 1u, 1u}}};
  EXPECT_THAT(PointRowsAtMasks(wide, 64, rows),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("fit")));

  // The mailbox hands a step its masks once; a dropped step's late masks are not kept.
  MaskMailbox mailbox;
  mailbox.Put({1, 2}, masks);
  auto got = mailbox.Take({1, 2}, [] { return false; });
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(got->size(), 1u);
  mailbox.DropThrough({1, 3});
  mailbox.Put({1, 3}, masks);
  EXPECT_THAT(mailbox.Take({1, 3}, [] { return true; }),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("never came")));
  mailbox.Put({2, 1}, masks);  // a new epoch starts its ids again
  EXPECT_THAT(mailbox.Take({2, 1}, [] { return false; }), IsOk());
  // A new coordinator process counts epochs from 1 again: after Reset its masks are kept.
  mailbox.DropThrough({7, 40});
  mailbox.Reset();
  mailbox.Put({1, 1}, masks);
  EXPECT_THAT(mailbox.Take({1, 1}, [] { return false; }), IsOk());
}

// A constraint's mask goes to the workers with its sequence's sampled row,
// and one too wide for the vocabulary is refused.
TEST_F(OverlapTest, TokenMaskTravelsWithTheSampledRow) {
  auto w = Worker(8);
  const ModelConfig& cfg = w->config();
  StepLimits limits{cfg.vocab_size, w->num_blocks(), w->block_size(), cfg.max_position_embeddings};
  SamplingParams params;
  params.temperature = 0.0f;
  std::vector<uint32_t> mask((cfg.vocab_size + 31) / 32, 0);
  mask[0] = 1u << 5;
  StepInput step;
  step.token_ids = {1, 2};
  step.positions = {0, 1};
  step.seq_of_token = {0, 0};
  step.block_tables = {{0}};
  SampleRow row;
  row.row = 1;
  row.sample = true;
  row.params = &params;
  row.allowed = mask.data();
  row.allowed_words = static_cast<int64_t>(mask.size());
  step.rows = {row};
  auto decoded = DecodeStep(EncodeStep(step, 1), limits);
  ASSERT_THAT(decoded, IsOk());
  const SampleRow& got = (*decoded)->step.rows[0];
  ASSERT_NE(got.allowed, nullptr);
  EXPECT_EQ(std::vector<uint32_t>(got.allowed, got.allowed + got.allowed_words), mask);
  auto rows = w->Execute((*decoded)->step);
  ASSERT_THAT(rows, IsOk());
  EXPECT_EQ((*rows)[0].token, 5) << "the only token the mask allows";
  mask.resize(mask.size() + 1);
  row.allowed_words = static_cast<int64_t>(mask.size());
  row.allowed = mask.data();
  step.rows = {row};
  EXPECT_THAT(
      DecodeStep(EncodeStep(step, 1), limits).status(),
      ::shardlm::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("token mask")));
}

}  // namespace
}  // namespace shardlm
