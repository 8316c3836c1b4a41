// The forward pass on N ranks (threads with real Gloo over loopback) against
// one rank: every sharded layer, the vocab-parallel embedding and head, and
// KV-head replication when ranks outnumber KV heads.
#include <ATen/ATen.h>
#include <gloo/rendezvous/hash_store.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "collectives/gloo_communicator.h"
#include "formats/tiny_model.h"
#include "tests/testing/status_matchers.h"
#include "worker/rank_worker.h"

namespace shardlm {
namespace {

using ::shardlm::testing::IsOk;
using ::shardlm::testing::StatusIs;
using ::testing::HasSubstr;

// A step that prefills 2 sequences (11 and 6 tokens) scoring every position.
struct ScoreStep {
  StepInput step;
  SamplingParams params;
  std::vector<int32_t> empty;
};

std::unique_ptr<ScoreStep> MakeStep() {
  auto s = std::make_unique<ScoreStep>();
  s->params.temperature = 0.0f;
  s->params.num_top_logprobs = 3;
  const std::vector<int32_t> lens = {11, 6};
  for (int seq = 0; seq < 2; ++seq) {
    s->step.block_tables.push_back({seq * 2, seq * 2 + 1});
    for (int p = 0; p < lens[seq]; ++p) {
      s->step.token_ids.push_back((p * 31 + seq * 7 + 3) % 256);
      s->step.positions.push_back(p);
      s->step.seq_of_token.push_back(seq);
    }
  }
  for (int32_t row = 0; row + 1 < static_cast<int32_t>(s->step.token_ids.size()); ++row) {
    SampleRow r;
    r.row = row;
    r.target = s->step.token_ids[row + 1];
    r.sample = true;
    r.params = &s->params;
    r.prompt = &s->empty;
    r.generated = &s->empty;
    s->step.rows.push_back(r);
  }
  return s;
}

std::string WriteModel(Arch arch, int64_t heads, int64_t kv_heads, const std::string& name) {
  std::string dir = ::testing::TempDir() + "/tp_" + name + "." + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  TinyModelOptions o;
  o.arch = arch;
  o.vocab_size = 256;
  o.hidden_size = 64;
  o.num_heads = heads;
  o.num_kv_heads = kv_heads;
  o.intermediate_size = 128;
  o.seed = 7;
  EXPECT_THAT(WriteTinyModel(dir, o), IsOk());
  return dir;
}

// Runs the step on `world` ranks; returns rank 0's results.
std::vector<RowResult> RunOn(const std::string& dir, int world, const StepInput& step) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<std::vector<RowResult>> results(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Communicator> comm;
      if (world == 1) {
        comm = MakeSingleRankCommunicator();
      } else {
        auto c = MakeGlooCommunicator({r, world}, store, GlooOptions{});
        ASSERT_THAT(c, IsOk());
        comm = std::move(*c);
      }
      RankWorkerOptions o;
      o.model_dir = dir;
      o.kv_cache_bytes = 8 << 20;
      auto w = RankWorker::Load(o, std::move(comm));
      ASSERT_THAT(w, IsOk());
      auto out = (*w)->Execute(step);
      ASSERT_THAT(out, IsOk());
      results[r] = *out;
      // Let every rank finish before any tears its connections down (see
      // the Gloo tests).
      EXPECT_THAT((*w)->communicator().Barrier(), IsOk());
    });
  }
  for (auto& t : threads) t.join();
  return results[0];
}

struct Case {
  const char* name;
  Arch arch;
  int64_t heads, kv_heads;
  int world;
};

class TensorParallelTest : public ::testing::TestWithParam<Case> {};

TEST_P(TensorParallelTest, LogitsMatchOneRank) {
  const Case c = GetParam();
  const std::string dir = WriteModel(c.arch, c.heads, c.kv_heads, c.name);
  auto step = MakeStep();
  std::vector<RowResult> one = RunOn(dir, 1, step->step);
  std::vector<RowResult> many = RunOn(dir, c.world, step->step);
  ASSERT_EQ(one.size(), many.size());
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_NEAR(many[i].target_logprob, one[i].target_logprob, 1e-4) << "row " << i;
    EXPECT_EQ(many[i].token, one[i].token) << "row " << i;
    EXPECT_EQ(many[i].top_ids, one[i].top_ids) << "row " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, TensorParallelTest,
                         ::testing::Values(Case{"llama_tp2", Arch::kLlama, 4, 2, 2},
                                           Case{"qwen2_tp2", Arch::kQwen2, 4, 2, 2},
                                           Case{"qwen3_tp4_replicated_kv", Arch::kQwen3, 4, 2, 4},
                                           Case{"llama_tp4_mha", Arch::kLlama, 4, 4, 4}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(TensorParallelLoadTest, MoreRanksThanQueryHeadsIsRefusedAtLoad) {
  const std::string dir = WriteModel(Arch::kLlama, 4, 2, "refused");
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < 5; ++r) {
    threads.emplace_back([&, r] {
      auto c = MakeGlooCommunicator({r, 5}, store, GlooOptions{});
      ASSERT_THAT(c, IsOk());
      RankWorkerOptions o;
      o.model_dir = dir;
      EXPECT_THAT(RankWorker::Load(o, std::move(*c)),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           HasSubstr("tensor parallel size 5 is more than num_attention_heads = 4")));
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace
}  // namespace shardlm
