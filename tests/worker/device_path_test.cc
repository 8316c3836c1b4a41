// The device path of a rank, checked on the CPU: the ATen-operator forward
// pass (what a GPU runs; kernels::ForceAtenOps) against the CPU kernels, the
// device sampler against ProcessRow, the one-copy step upload, and the
// --device flag's answers on a build without CUDA.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <set>

#include "formats/checkpoint.h"
#include "formats/tiny_model.h"
#include "kernels/fused.h"
#include "model/device.h"
#include "model/device_sampling.h"
#include "model/sampling.h"
#include "model/step_upload.h"
#include "tests/testing/status_matchers.h"
#include "worker/rank_worker.h"

namespace shardlm {
namespace {

using ::shardlm::testing::IsOk;
using ::shardlm::testing::StatusIs;
using ::testing::HasSubstr;

// Two steps on one rank: a prefill of two sequences (11 and 6 tokens, every
// position scored), then one decode row each.
struct Steps {
  StepInput prefill, decode;
  SamplingParams params;
  std::vector<int32_t> empty;
};

std::unique_ptr<Steps> MakeSteps() {
  auto s = std::make_unique<Steps>();
  s->params.temperature = 0.0f;
  s->params.num_top_logprobs = 3;
  const std::vector<int32_t> lens = {11, 6};
  auto row = [&](int32_t r, int32_t seq, int32_t target) {
    SampleRow x;
    x.row = r;
    x.seq = seq;
    x.target = target;
    x.sample = true;
    x.params = &s->params;
    x.prompt = &s->empty;
    x.generated = &s->empty;
    return x;
  };
  for (int seq = 0; seq < 2; ++seq) {
    s->prefill.block_tables.push_back({seq * 2 + 1, seq * 2});  // blocks out of order
    s->decode.block_tables.push_back({seq * 2 + 1, seq * 2});
    for (int p = 0; p < lens[seq]; ++p) {
      s->prefill.token_ids.push_back((p * 31 + seq * 7 + 3) % 256);
      s->prefill.positions.push_back(p);
      s->prefill.seq_of_token.push_back(seq);
    }
    s->decode.token_ids.push_back((seq * 5 + 11) % 256);
    s->decode.positions.push_back(lens[seq]);
    s->decode.seq_of_token.push_back(seq);
    s->decode.rows.push_back(row(seq, seq, 17));
  }
  for (int32_t r = 0; r + 1 < static_cast<int32_t>(s->prefill.token_ids.size()); ++r) {
    s->prefill.rows.push_back(row(r, s->prefill.seq_of_token[r], s->prefill.token_ids[r + 1]));
  }
  return s;
}

std::string WriteModel(Arch arch, DType dtype, const std::string& name) {
  std::string dir = ::testing::TempDir() + "/device_" + name + "." + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  TinyModelOptions o;
  o.arch = arch;
  o.dtype = dtype;
  o.vocab_size = 256;
  o.hidden_size = 64;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.intermediate_size = 128;
  o.sliding_window = 8;  // Mistral: shorter than the first prompt
  o.seed = 11;
  EXPECT_THAT(WriteTinyModel(dir, o), IsOk());
  return dir;
}

std::vector<RowResult> RunSteps(const std::string& dir, bool aten) {
  kernels::ForceAtenOps(aten);
  auto steps = MakeSteps();
  RankWorkerOptions o;
  o.model_dir = dir;
  o.kv_cache_bytes = 8 << 20;
  auto w = RankWorker::Load(o, MakeSingleRankCommunicator());
  std::vector<RowResult> all;
  if (w.ok()) {
    for (const StepInput* step : {&steps->prefill, &steps->decode}) {
      auto out = (*w)->Execute(*step);
      EXPECT_THAT(out, IsOk());
      if (out.ok()) all.insert(all.end(), out->begin(), out->end());
    }
  }
  kernels::ForceAtenOps(false);
  EXPECT_THAT(w, IsOk());
  return all;
}

// The same tokens, and log-probabilities within `tol` (0: the same floats).
void ExpectSameRows(const absl::StatusOr<std::vector<RowResult>>& got,
                    const absl::StatusOr<std::vector<RowResult>>& want, double tol) {
  ASSERT_THAT(want, IsOk());
  ASSERT_THAT(got, IsOk());
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < got->size(); ++i) {
    EXPECT_EQ((*got)[i].token, (*want)[i].token);
    EXPECT_NEAR((*got)[i].logprob, (*want)[i].logprob, tol);
    EXPECT_NEAR((*got)[i].target_logprob, (*want)[i].target_logprob, tol);
  }
}

struct Case {
  const char* name;
  Arch arch;
  DType dtype;
  double max_err, mean_err;  // log-prob units
};

class AtenPathTest : public ::testing::TestWithParam<Case> {};

TEST_P(AtenPathTest, MatchesTheCpuKernels) {
  const Case c = GetParam();
  const std::string dir = WriteModel(c.arch, c.dtype, c.name);
  const std::vector<RowResult> cpu = RunSteps(dir, false);
  const std::vector<RowResult> aten = RunSteps(dir, true);
  ASSERT_EQ(cpu.size(), aten.size());
  ASSERT_EQ(cpu.size(), 18u);  // 16 prefill rows and 2 decode rows
  int same_tokens = 0;
  double max_err = 0, sum_err = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    for (double e : {std::abs(aten[i].target_logprob - cpu[i].target_logprob),
                     std::abs(aten[i].logprob - cpu[i].logprob)}) {
      max_err = std::max(max_err, e);
      sum_err += e;
    }
    same_tokens += aten[i].token == cpu[i].token;
  }
  // The bounds of docs/numerics.md: f32 paths agree to float rounding; in bf16
  // the ATen path rounds the attention scores to bf16 as Hugging Face's eager
  // attention does, and the CPU kernel keeps them in f32.
  EXPECT_LT(max_err, c.max_err);
  EXPECT_LT(sum_err / (2.0 * cpu.size()), c.mean_err);
  // bf16 rounds differently along the two paths, so a near tie may flip.
  EXPECT_GE(same_tokens, c.dtype == DType::kF32 ? 18 : 16);
}

INSTANTIATE_TEST_SUITE_P(Models, AtenPathTest,
                         ::testing::Values(Case{"llama_f32", Arch::kLlama, DType::kF32, 2e-4, 1e-4},
                                           Case{"qwen2_f32", Arch::kQwen2, DType::kF32, 2e-4, 1e-4},
                                           Case{"qwen3_f32", Arch::kQwen3, DType::kF32, 2e-4, 1e-4},
                                           Case{"mistral_window_f32", Arch::kMistral, DType::kF32, 2e-4,
                                                1e-4},
                                           Case{"llama_bf16", Arch::kLlama, DType::kBF16, 0.25, 0.06}),
                         [](const auto& info) { return std::string(info.param.name); });

// A rank with CUDA graph buckets run eagerly (what the CPU can check of
// them: model/step_graphs.h) answers as a rank without: the prefill runs
// eagerly (past the largest bucket), the decode through bucket 2; after a
// regroup, which drops the graphs and zeroes the cache, the same again.
TEST(RankWorkerGraphsTest, EagerBucketsGiveTheSameRows) {
  const std::string dir = WriteModel(Arch::kLlama, DType::kF32, "graphs");
  kernels::ForceAtenOps(true);
  auto steps = MakeSteps();
  RankWorkerOptions o;
  o.model_dir = dir;
  o.kv_cache_bytes = 8 << 20;
  auto plain = RankWorker::Load(o, MakeSingleRankCommunicator());
  o.cuda_graph_max_batch = 4;
  o.cuda_graph_capture = false;
  auto graphs = RankWorker::Load(o, MakeSingleRankCommunicator());
  ASSERT_THAT(plain, IsOk());
  ASSERT_THAT(graphs, IsOk());
  EXPECT_THAT((*graphs)->graph_buckets(), ::testing::ElementsAre(1, 2, 4));
  EXPECT_TRUE((*plain)->graph_buckets().empty());
  EXPECT_EQ((*graphs)->num_blocks(), (*plain)->num_blocks());  // the scratch block is not the allocator's
  for (int round = 0; round < 2; ++round) {
    for (const StepInput* step : {&steps->prefill, &steps->decode}) {
      ExpectSameRows((*graphs)->Execute(*step), (*plain)->Execute(*step), 1e-4);
    }
    EXPECT_THAT((*plain)->Regroup(), IsOk());
    EXPECT_THAT((*graphs)->Regroup(), IsOk());
  }
  kernels::ForceAtenOps(false);
}

// Load's warm-up (RankWorkerOptions::warmup_tokens) runs a prompt step and a
// decode step and zeroes the blocks they wrote: the pool is all zeros after
// it, on the CPU kernels and on the ATen path (a GPU's), with room for the
// whole warm-up and with a pool of two blocks (one shorter sequence), and
// the rows of real steps afterwards are those of a rank that did not warm up.
TEST(RankWorkerWarmupTest, LeavesAZeroPoolAndTheSameRows) {
  const std::string dir = WriteModel(Arch::kLlama, DType::kF32, "warmup");
  for (bool aten : {false, true}) {
    kernels::ForceAtenOps(aten);
    RankWorkerOptions o;
    o.model_dir = dir;
    o.kv_cache_bytes = 8 << 20;
    o.warmup_tokens = 0;
    auto cold = RankWorker::Load(o, MakeSingleRankCommunicator());
    ASSERT_THAT(cold, IsOk());
    // K and V of one block, every layer (no scratch block without graphs).
    const int64_t block_bytes =
        2 * static_cast<int64_t>((*cold)->pool().k().nbytes()) / (*cold)->num_blocks();
    for (int64_t bytes : {o.kv_cache_bytes, 2 * block_bytes}) {
      SCOPED_TRACE(::testing::Message() << "aten " << aten << ", pool bytes " << bytes);
      o.kv_cache_bytes = bytes;
      o.warmup_tokens = 256;
      auto warm = RankWorker::Load(o, MakeSingleRankCommunicator());
      ASSERT_THAT(warm, IsOk());
      if (bytes == 2 * block_bytes) {
        ASSERT_EQ((*warm)->num_blocks(), 2);
      }
      EXPECT_EQ((*warm)->pool().k().abs().sum().item<double>(), 0.0);
      EXPECT_EQ((*warm)->pool().v().abs().sum().item<double>(), 0.0);
      if (bytes != 2 * block_bytes) {
        auto steps = MakeSteps();
        for (const StepInput* step : {&steps->prefill, &steps->decode}) {
          ExpectSameRows((*warm)->Execute(*step), (*cold)->Execute(*step), 0.0);
        }
        // The steps wrote the pool: a look that could not fail would not see it.
        EXPECT_GT((*warm)->pool().k().abs().sum().item<double>(), 0.0);
      }
    }
  }
  kernels::ForceAtenOps(false);
}

TEST(DeviceSamplingTest, MatchesProcessRow) {
  const int64_t vocab = 1000;
  std::mt19937 gen(5);
  at::manual_seed(5);
  // Peaked enough that a top-p prefix is short, flat enough that draws vary.
  at::Tensor logits = at::randn({0}, at::kFloat);
  std::vector<SamplingParams> params(11);
  params[0].temperature = 0.0f;  // greedy
  params[1].temperature = 0.8f;  // plain draw
  params[2].temperature = 1.0f;
  params[2].top_k = 20;
  params[3].temperature = 0.7f;
  params[3].top_p = 0.9f;
  params[4].temperature = 1.2f;
  params[4].top_k = 50;
  params[4].top_p = 0.8f;
  params[4].min_p = 0.05f;
  params[5].temperature = 1.0f;
  params[5].repetition_penalty = 1.3f;
  params[5].presence_penalty = 0.5f;
  params[5].frequency_penalty = 0.25f;
  params[6].temperature = 0.0f;
  params[6].logit_bias = {{3, 40.0f}, {4, -5.0f}};
  params[7].temperature = 0.9f;
  params[7].min_p = 0.1f;
  params[7].num_top_logprobs = 5;
  params[8].temperature = 0.0f;
  params[8].num_top_logprobs = 3;
  params[9].temperature = 0.0f;   // constrained (a mask), greedy
  params[10].temperature = 1.0f;  // constrained, drawn under top-p, with a bias
  params[10].top_p = 0.9f;
  params[10].logit_bias = {{3, 5.0f}};
  // A constraint's mask: ids = 3 (mod 7).
  std::vector<uint32_t> mask((vocab + 31) / 32, 0);
  for (int64_t id = 3; id < vocab; id += 7) mask[id / 32] |= 1u << (id % 32);
  const std::vector<int32_t> prompt = {1, 2, 3, 5, 8, 13}, generated = {21, 21, 34, 1};
  std::vector<SampleRow> rows;
  const int per = 24;
  for (size_t k = 0; k < params.size(); ++k) {
    for (int i = 0; i < per; ++i) {
      SampleRow r;
      r.row = static_cast<int32_t>(rows.size());
      r.sample = k != 8 || i % 2 == 0;  // some rows only score
      r.params = &params[k];
      r.target = static_cast<int32_t>((k * 37 + i) % vocab);
      r.prompt = &prompt;
      r.generated = &generated;
      r.draw_seed = DrawSeed(1000 + k, i);
      if (k >= 9) {
        r.allowed = mask.data();
        r.allowed_words = static_cast<int64_t>(mask.size());
      }
      rows.push_back(r);
    }
  }
  logits = at::randn({static_cast<int64_t>(rows.size()), vocab}, at::kFloat) * 3.0;
  // Ties at the top-k and top-n boundaries (bf16 logits have many): rows of
  // the top-k and the top-n parameters get logits rounded to whole numbers.
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].params == &params[2] || rows[i].params == &params[8]) logits[i].round_();
  }
  const std::vector<RowResult> dev = ProcessRowsOnDevice(logits, rows);
  ASSERT_EQ(dev.size(), rows.size());
  int same = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowResult ref = ProcessRow(logits[i].data_ptr<float>(), vocab, rows[i]);
    same += dev[i].token == ref.token;
    if (rows[i].allowed != nullptr) {
      EXPECT_EQ(dev[i].token % 7, 3) << "masked row " << i;
    }
    if (rows[i].params->temperature <= 0.0f) {
      EXPECT_EQ(dev[i].token, ref.token) << "greedy row " << i;
    }
    if (dev[i].token == ref.token) {
      EXPECT_NEAR(dev[i].logprob, ref.logprob, 1e-4) << "row " << i;
    }
    EXPECT_NEAR(dev[i].target_logprob, ref.target_logprob, 1e-4) << "row " << i;
    EXPECT_EQ(dev[i].top_ids, ref.top_ids) << "row " << i;
    ASSERT_EQ(dev[i].top_logprobs.size(), ref.top_logprobs.size());
    for (size_t j = 0; j < ref.top_logprobs.size(); ++j)
      EXPECT_NEAR(dev[i].top_logprobs[j], ref.top_logprobs[j], 1e-4);
  }
  // A draw differs only where the uniform number lands within rounding of a
  // boundary between two candidates: none of these 264 should.
  EXPECT_EQ(same, static_cast<int>(rows.size()));
}

TEST(StepUploadTest, RegionsComeBackTypedAndInOrder) {
  StepUpload up;
  const std::vector<int64_t> a = {1, -2, 3};
  const std::vector<int32_t> b = {7};
  const std::vector<float> c = {0.5f, 1.5f};
  const std::vector<int64_t> none;
  const int ia = up.Add(a), ib = up.Add(b), ic = up.Add(c), in = up.Add(none);
  up.Upload(at::kCPU);
  EXPECT_TRUE(up.Get(ia).equal(at::tensor(a, at::kLong)));
  EXPECT_TRUE(up.Get(ib).equal(at::tensor(b, at::kInt)));
  EXPECT_TRUE(up.Get(ic).equal(at::tensor(c, at::kFloat)));
  EXPECT_EQ(up.Get(in).numel(), 0);
}

// The benchmark's multi-GB checkpoints: fast uniform weights with the
// requested moments, a model that loads and gives finite, varied logits.
TEST(TinyModelTest, FastRandomWeights) {
  const std::string dir = ::testing::TempDir() + "/device_fast." + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  TinyModelOptions o;
  o.vocab_size = 256;
  o.hidden_size = 64;
  o.intermediate_size = 128;
  o.shards = 2;
  o.fast_random = true;
  ASSERT_THAT(WriteTinyModel(dir, o), IsOk());
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_THAT(ckpt, IsOk());
  auto w = (*ckpt)->Get("model.layers.0.mlp.gate_proj.weight");  // mean 0, std 1/sqrt(64)
  ASSERT_THAT(w, IsOk());
  const float* v = reinterpret_cast<const float*>((*w)->data);
  double sum = 0, sq = 0;
  const int64_t n = (*w)->numel();
  for (int64_t i = 0; i < n; ++i) {
    sum += v[i];
    sq += v[i] * v[i];
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sq / n), 0.125, 0.01);
  auto norm = (*ckpt)->Get("model.norm.weight");  // mean 1
  ASSERT_THAT(norm, IsOk());
  EXPECT_NEAR(reinterpret_cast<const float*>((*norm)->data)[0], 1.0, 0.2);
  const std::vector<RowResult> out = RunSteps(dir, false);
  ASSERT_EQ(out.size(), 18u);
  std::set<int32_t> tokens;
  for (const RowResult& r : out) {
    EXPECT_TRUE(std::isfinite(r.target_logprob));
    tokens.insert(r.token);
  }
  EXPECT_GT(tokens.size(), 3u);
}

TEST(DeviceFlagTest, CpuBuildAnswers) {
  if (VisibleCudaDevices() > 0) GTEST_SKIP() << "a GPU is visible: these are the CPU build's answers";
  auto cpu = ResolveDevice("cpu");
  ASSERT_THAT(cpu, IsOk());
  EXPECT_TRUE(cpu->is_cpu());
  auto automatic = ResolveDevice("auto", 3);
  ASSERT_THAT(automatic, IsOk());
  EXPECT_TRUE(automatic->is_cpu());
  EXPECT_THAT(ResolveDevice("cuda"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("--device cuda")));
  EXPECT_THAT(ResolveDevice("cuda:1"), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("cuda:1")));
  EXPECT_THAT(ResolveDevice("gpu"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cpu, cuda or cuda:N")));
  EXPECT_THAT(ResolveDevice("cuda:x"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cuda:N")));
}

}  // namespace
}  // namespace shardlm
