// model/step_graphs: the CUDA graphs' padded static buffers, run eagerly on
// the CPU (Options::capture false), against the plain forward pass on a pool
// without a scratch block. Capture and replay themselves need a GPU
// (scripts/gpu/test.sh); everything around them is checked here: the
// buckets, the padding rows and their scratch block, the one-upload layout
// with the tables last and their width on the device, the rows taken out of
// the graph's output in the step's order.
#include "model/step_graphs.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "common/status.h"
#include "formats/checkpoint.h"
#include "formats/model_config.h"
#include "formats/tiny_model.h"
#include "kernels/fused.h"
#include "partitioning/shard_plan.h"
#include "tests/testing/status_matchers.h"

namespace shardlm {
namespace {

using ::shardlm::testing::IsOk;
using ::shardlm::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(StepGraphsTest, Buckets) {
  EXPECT_THAT(StepGraphs::Buckets(1), ElementsAre(1));
  EXPECT_THAT(StepGraphs::Buckets(6), ElementsAre(1, 2, 4, 6));
  EXPECT_THAT(StepGraphs::Buckets(8), ElementsAre(1, 2, 4, 8));
  EXPECT_THAT(StepGraphs::Buckets(30), ElementsAre(1, 2, 4, 8, 16, 24, 30));
}

// A sequence's step: `n` tokens from `pos` on, each sampled.
void AddTokens(StepInput& step, int32_t seq, int32_t pos, int32_t n) {
  for (int32_t i = 0; i < n; ++i) {
    step.token_ids.push_back((pos * 37 + seq * 11 + i * 5 + 3) % 256);
    step.positions.push_back(pos + i);
    step.seq_of_token.push_back(seq);
  }
}

void SampleAll(StepInput& step, bool reversed) {
  const int32_t T = static_cast<int32_t>(step.token_ids.size());
  for (int32_t r = 0; r < T; ++r) {
    SampleRow row;
    row.row = reversed ? T - 1 - r : r;
    row.seq = step.seq_of_token[row.row];
    row.sample = true;
    step.rows.push_back(row);
  }
}

// Four steps over three sequences: a 17-token prefill (past the largest
// bucket, 8: eager), two decodes (bucket 2), two decodes and a 3-token prompt
// chunk with its rows reversed (bucket 8, 3 padding rows), three decodes
// (bucket 4, 1 padding row).
std::vector<StepInput> MakeSteps() {
  std::vector<StepInput> steps(4);
  const std::vector<std::vector<int32_t>> tables = {{1, 0}, {3, 2}, {4}};
  steps[0].block_tables = {tables[0], tables[1]};
  AddTokens(steps[0], 0, 0, 11);
  AddTokens(steps[0], 1, 0, 6);
  SampleAll(steps[0], false);
  steps[1].block_tables = {tables[0], tables[1]};
  AddTokens(steps[1], 0, 11, 1);
  AddTokens(steps[1], 1, 6, 1);
  SampleAll(steps[1], false);
  steps[2].block_tables = tables;
  AddTokens(steps[2], 0, 12, 1);
  AddTokens(steps[2], 1, 7, 1);
  AddTokens(steps[2], 2, 0, 3);
  SampleAll(steps[2], true);
  steps[3].block_tables = tables;
  AddTokens(steps[3], 0, 13, 1);
  AddTokens(steps[3], 1, 8, 1);
  AddTokens(steps[3], 2, 3, 1);
  SampleAll(steps[3], false);
  return steps;
}

// A one-rank model of `arch` written to a fresh folder, with a plain pool of
// 6 blocks and the same pool with a scratch block.
struct Rig {
  std::string dir;
  std::unique_ptr<Communicator> comm = MakeSingleRankCommunicator();
  std::unique_ptr<LlamaModel> model;
  absl::StatusOr<KvPool> plain = absl::UnknownError("unset"), padded = absl::UnknownError("unset");

  absl::Status Make(Arch arch, const std::string& name) {
    dir = ::testing::TempDir() + "/step_graphs_" + name + "." + std::to_string(::getpid());
    std::filesystem::remove_all(dir);
    TinyModelOptions o;
    o.arch = arch;
    o.vocab_size = 256;
    o.hidden_size = 64;
    o.num_heads = 4;
    o.num_kv_heads = 2;
    o.intermediate_size = 128;
    o.sliding_window = 8;  // Mistral: shorter than the prefill
    o.seed = 5;
    SHARDLM_RETURN_IF_ERROR(WriteTinyModel(dir, o));
    SHARDLM_ASSIGN_OR_RETURN(ModelConfig cfg, LoadModelConfig(dir));
    SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(dir));
    SHARDLM_ASSIGN_OR_RETURN(ShardPlan plan, ShardPlan::Make(cfg, RankInfo{}));
    SHARDLM_ASSIGN_OR_RETURN(model, LlamaModel::Load(cfg, *ckpt, plan, at::kFloat, comm.get()));
    KvPoolShape shape;
    shape.num_layers = cfg.num_layers;
    shape.num_blocks = 6;
    shape.num_kv_heads_per_rank = cfg.num_kv_heads;
    shape.head_dim = cfg.head_dim;
    plain = KvPool::Create(shape, at::kFloat);
    padded = KvPool::Create(shape, at::kFloat, at::kCPU, /*scratch_blocks=*/1);
    SHARDLM_RETURN_IF_ERROR(plain.status());
    return padded.status();
  }
  ~Rig() { std::filesystem::remove_all(dir); }
};

struct Case {
  const char* name;
  Arch arch;
  bool aten;  // the ATen-operator path a GPU runs (kernels::ForceAtenOps)
};

class StepGraphsEagerTest : public ::testing::TestWithParam<Case> {
 protected:
  void TearDown() override { kernels::ForceAtenOps(false); }
};

TEST_P(StepGraphsEagerTest, PaddedBucketsEqualThePlainForwardPass) {
  const Case c = GetParam();
  Rig rig;
  ASSERT_THAT(rig.Make(c.arch, c.name), IsOk());
  kernels::ForceAtenOps(c.aten);
  LlamaModel& model = *rig.model;
  KvPool& plain = *rig.plain;
  KvPool& padded = *rig.padded;
  EXPECT_EQ(padded.scratch_block(), 6);
  EXPECT_EQ(padded.k().size(1), 7);
  EXPECT_EQ(plain.scratch_block(), -1);

  StepGraphs::Options go;
  go.max_batch = 8;
  go.capture = false;
  auto graphs = StepGraphs::Create(model, padded, go);
  ASSERT_THAT(graphs, IsOk());
  EXPECT_THAT((*graphs)->bucket_sizes(), ElementsAre(1, 2, 4, 8));

  const std::vector<StepInput> steps = MakeSteps();
  const std::vector<bool> taken = {false, true, true, true};
  for (size_t i = 0; i < steps.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    ASSERT_EQ((*graphs)->Takes(steps[i]), taken[i]);
    auto want = model.Forward(steps[i], plain);
    auto got = taken[i] ? (*graphs)->Run(steps[i]) : model.Forward(steps[i], padded);
    ASSERT_THAT(want, IsOk());
    ASSERT_THAT(got, IsOk());
    ASSERT_EQ(got->sizes(), want->sizes());
    // Rows are computed alike whatever else is in the batch; the products'
    // blocking may differ with the row count.
    EXPECT_LT((*got - *want).abs().max().item<float>(), 1e-4) << "rows " << steps[i].rows.size();
  }
  // Only the scratch block and the sequences' own blocks were written; the
  // cache itself equals the plain pass's.
  const at::Tensor written = padded.k().narrow(1, 0, 6);
  EXPECT_LT((written - plain.k()).abs().max().item<float>(), 1e-4);
  EXPECT_GT(padded.k().select(1, 6).abs().max().item<float>(), 0.0f);  // the padding rows' keys
}

INSTANTIATE_TEST_SUITE_P(Models, StepGraphsEagerTest,
                         ::testing::Values(Case{"llama_aten", Arch::kLlama, true},
                                           Case{"mistral_window_aten", Arch::kMistral, true},
                                           Case{"qwen3_cpu_kernels", Arch::kQwen3, false}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(StepGraphsTest, NeedsAScratchBlockAndCaptureNeedsCuda) {
  Rig rig;
  ASSERT_THAT(rig.Make(Arch::kLlama, "errors"), IsOk());
  LlamaModel& model = *rig.model;
  StepGraphs::Options go;
  EXPECT_THAT(StepGraphs::Create(model, *rig.plain, go),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("scratch block")));
  EXPECT_THAT(StepGraphs::Create(model, *rig.padded, go),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no graphs on cpu")));
  go.max_batch = 0;
  EXPECT_THAT(StepGraphs::Create(model, *rig.padded, go),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_batch")));
}

}  // namespace
}  // namespace shardlm
