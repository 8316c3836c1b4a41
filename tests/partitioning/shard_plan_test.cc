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

// SmolLM2's shape: 9 query heads over 3 KV heads (groups of 3), FFN 1536, split 2 and 4 ways.
ModelConfig SmolShape() {
  ModelConfig c;
  c.hidden_size = 576;
  c.num_heads = 9;
  c.num_kv_heads = 3;
  c.head_dim = 64;
  c.intermediate_size = 1538;  // not a multiple of 4, to split unevenly too
  c.vocab_size = 49152;
  return c;
}

TEST(ShardPlanTest, UnevenHeadsSplitAsEvenlyAsPossibleWithTheirKvHeads) {
  struct Want {
    int64_t q_start, q_len, kv_start, kv_len, offset;
  };
  const std::vector<Want> two = {{0, 5, 0, 2, 0}, {5, 4, 1, 2, 2}};
  const std::vector<Want> four = {{0, 3, 0, 1, 0}, {3, 2, 1, 1, 0}, {5, 2, 1, 2, 2}, {7, 2, 2, 1, 1}};
  for (const auto& [world, wants] : {std::pair{2, two}, {4, four}}) {
    for (int r = 0; r < world; ++r) {
      auto plan = ShardPlan::Make(SmolShape(), {r, world});
      ASSERT_THAT(plan, IsOk());
      const Want& w = wants[r];
      SCOPED_TRACE(::testing::Message() << "rank " << r << " of " << world);
      EXPECT_EQ(plan->q_head_start(), w.q_start);
      EXPECT_EQ(plan->num_heads_per_rank(), w.q_len);
      EXPECT_EQ(plan->kv_head_start(), w.kv_start);
      EXPECT_EQ(plan->num_kv_heads_per_rank(), w.kv_len);
      EXPECT_EQ(plan->kv_group(), 3);
      EXPECT_EQ(plan->q_head_offset(), w.offset);
      // Every local query head reads a local KV head, the one its global head reads.
      for (int64_t i = 0; i < w.q_len; ++i) {
        EXPECT_EQ(plan->kv_head_start() + (i + plan->q_head_offset()) / plan->kv_group(),
                  (w.q_start + i) / 3);
      }
      SliceSpec q = plan->SliceFor("model.layers.0.self_attn.q_proj.weight");
      EXPECT_EQ(q.start, w.q_start * 64);
      EXPECT_EQ(q.length, w.q_len * 64);
      SliceSpec o = plan->SliceFor("model.layers.0.self_attn.o_proj.weight");
      EXPECT_EQ(o.dim, 1);
      EXPECT_EQ(o.start, w.q_start * 64);
      SliceSpec v = plan->SliceFor("model.layers.0.self_attn.v_proj.weight");
      EXPECT_EQ(v.start, w.kv_start * 64);
      EXPECT_EQ(v.length, w.kv_len * 64);
    }
  }
}

TEST(ShardPlanTest, TheFfnSplitsUnevenlyAndCoversEveryColumnOnce) {
  int64_t next = 0;
  for (int r = 0; r < 4; ++r) {
    auto plan = ShardPlan::Make(SmolShape(), {r, 4});
    ASSERT_THAT(plan, IsOk());
    SliceSpec up = plan->SliceFor("model.layers.0.mlp.up_proj.weight");
    SliceSpec down = plan->SliceFor("model.layers.0.mlp.down_proj.weight");
    EXPECT_EQ(up.start, next);
    EXPECT_EQ(up.length, r < 2 ? 385 : 384);  // 1538 = 385 + 385 + 384 + 384
    EXPECT_EQ(down.start, up.start);
    EXPECT_EQ(down.length, up.length);
    next += up.length;
  }
  EXPECT_EQ(next, 1538);
}

TEST(ShardPlanTest, HiddenAndVocabularySplitIntoPartsTheCollectivesCarry) {
  // 576 and 49152 over 5 ranks: 116 + 4 x 115, and 9831 + 9831 + 3 x 9830.
  for (int r = 0; r < 5; ++r) {
    auto plan = ShardPlan::Make(SmolShape(), {r, 5});
    ASSERT_THAT(plan, IsOk());
    EXPECT_THAT(plan->hidden_parts(), ::testing::ElementsAre(116, 115, 115, 115, 115));
    EXPECT_THAT(plan->vocab_parts(), ::testing::ElementsAre(9831, 9831, 9830, 9830, 9830));
    EXPECT_EQ(plan->hidden_per_rank(), r == 0 ? 116 : 115);
    SliceSpec emb = plan->SliceFor("model.embed_tokens.weight");
    EXPECT_EQ(emb.start, plan->vocab_start());
    EXPECT_EQ(emb.start, r * 9830 + std::min(r, 2));
    EXPECT_EQ(emb.length, r < 2 ? 9831 : 9830);
  }
}

// A K-quant down projection's 256-weight blocks are never cut: Qwen2.5-Coder-1.5B's
// FFN of 8960 (35 blocks) is 18 + 17 blocks on 2 ranks, 12 + 12 + 11 on 3.
TEST(ShardPlanTest, TheFfnSplitsOnTheDownProjectionsBlocks) {
  ModelConfig c = Config(12, 2);
  c.intermediate_size = 8960;
  c.intermediate_block = 256;
  for (const auto& [world, lengths] :
       {std::pair<int, std::vector<int64_t>>{2, {4608, 4352}}, {3, {3072, 3072, 2816}}, {1, {8960}}}) {
    int64_t next = 0;
    for (int r = 0; r < world; ++r) {
      auto plan = ShardPlan::Make(c, {r, world});
      ASSERT_THAT(plan, IsOk());
      EXPECT_EQ(plan->intermediate_per_rank(), lengths[r]) << world << " ranks, rank " << r;
      const SliceSpec down = plan->SliceFor("model.layers.3.mlp.down_proj.weight");
      const SliceSpec up = plan->SliceFor("model.layers.3.mlp.up_proj.weight");
      if (world == 1) continue;
      EXPECT_EQ(down.start, next);
      EXPECT_EQ(down.start % 256, 0);
      EXPECT_EQ(up.start, down.start);
      EXPECT_EQ(up.length, down.length);
      next += down.length;
    }
    if (world > 1) EXPECT_EQ(next, 8960);
  }
  // Fewer blocks than ranks: as evenly as possible (Gemma 3 270M's 2048 is 8 blocks).
  c.intermediate_size = 512;
  auto plan = ShardPlan::Make(c, {0, 3});
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->intermediate_per_rank(), 171);
}

TEST(ShardPlanTest, MoreRanksThanQueryHeadsNamesTheDimension) {
  EXPECT_THAT(ShardPlan::Make(SmolShape(), {0, 10}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor parallel size 10 is more than num_attention_heads = 9")));
  EXPECT_THAT(ShardPlan::Make(Config(4, 2), {0, 5}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("more than num_attention_heads = 4")));
}

}  // namespace
}  // namespace shardlm
