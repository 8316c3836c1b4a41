#include "partitioning/shard_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace shardlm {
namespace {

using ::shardlm::testing::IsOk;
using ::shardlm::testing::StatusIs;
using ::testing::HasSubstr;

ModelConfig Config(int64_t heads, int64_t kv_heads) {
  ModelConfig c;
  c.hidden_size = 64;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = 64 / heads;
  c.intermediate_size = 128;
  c.vocab_size = 512;
  return c;
}

TEST(ShardPlanTest, WorldSizeOneHoldsEverything) {
  auto plan = ShardPlan::Make(Config(4, 2), {0, 1});
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->SliceFor("model.layers.0.self_attn.q_proj.weight").dim, -1);
  EXPECT_EQ(plan->num_kv_heads_per_rank(), 2);
}

TEST(ShardPlanTest, ColumnRowAndVocabSlicesForRankOneOfTwo) {
  auto plan = ShardPlan::Make(Config(4, 2), {1, 2});
  ASSERT_THAT(plan, IsOk());
  SliceSpec q = plan->SliceFor("model.layers.3.self_attn.q_proj.weight");
  EXPECT_EQ(q.dim, 0);
  EXPECT_EQ(q.start, 32);  // heads 2..3 of head_dim 16
  EXPECT_EQ(q.length, 32);
  SliceSpec o = plan->SliceFor("model.layers.3.self_attn.o_proj.weight");
  EXPECT_EQ(o.dim, 1);
  EXPECT_EQ(o.start, 32);
  SliceSpec k = plan->SliceFor("model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(k.start, 16);  // KV head 1
  EXPECT_EQ(k.length, 16);
  SliceSpec down = plan->SliceFor("model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(down.dim, 1);
  EXPECT_EQ(down.start, 64);
  SliceSpec emb = plan->SliceFor("model.embed_tokens.weight");
  EXPECT_EQ(emb.kind, ShardKind::kVocab);
  EXPECT_EQ(emb.start, 256);
  EXPECT_EQ(plan->SliceFor("model.norm.weight").dim, -1);
}

TEST(ShardPlanTest, FewerKvHeadsThanRanksReplicatesTheRightHead) {
  // 4 query heads, 2 KV heads, 4 ranks: ranks 0,1 use KV head 0; ranks 2,3 KV head 1.
  for (int r = 0; r < 4; ++r) {
    auto plan = ShardPlan::Make(Config(4, 2), {r, 4});
    ASSERT_THAT(plan, IsOk());
    EXPECT_EQ(plan->num_kv_heads_per_rank(), 1);
    EXPECT_EQ(plan->kv_head_start(), r / 2) << "rank " << r;
  }
}

TEST(ShardPlanTest, IndivisibleWorldSizeNamesTheDimension) {
  EXPECT_THAT(
      ShardPlan::Make(Config(4, 2), {0, 3}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("does not divide num_attention_heads = 4")));
  ModelConfig c = Config(8, 8);
  c.num_kv_heads = 6;
  c.num_heads = 12;
  c.hidden_size = 48;
  c.head_dim = 4;
  c.intermediate_size = 96;
  c.vocab_size = 480;
  EXPECT_THAT(ShardPlan::Make(c, {0, 4}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_key_value_heads = 6")));
}

}  // namespace
}  // namespace shardlm
