#include "formats/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace shardlm {
namespace {

using ::shardlm::testing::IsOk;
using ::shardlm::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kLlama31[] = R"({
  "architectures": ["LlamaForCausalLM"], "vocab_size": 128256, "hidden_size": 4096,
  "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
  "num_key_value_heads": 8, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]})";

TEST(ModelConfigTest, ParsesLlama31) {
  auto cfg = ParseModelConfig(kLlama31, "config.json");
  ASSERT_THAT(cfg, IsOk());
  EXPECT_EQ(cfg->arch, Arch::kLlama);
  EXPECT_EQ(cfg->head_dim, 128);
  EXPECT_EQ(cfg->num_kv_heads, 8);
  ASSERT_TRUE(cfg->rope_scaling.has_value());
  EXPECT_EQ(cfg->rope_scaling->original_max_position_embeddings, 8192);
  EXPECT_THAT(cfg->eos_token_ids, ElementsAre(128001, 128008, 128009));
  EXPECT_FALSE(cfg->attention_bias);
  EXPECT_FALSE(cfg->sliding_window.has_value());
}

TEST(ModelConfigTest, Qwen2HasBiasQwen3HasQkNormAndExplicitHeadDim) {
  auto q2 = ParseModelConfig(R"({"architectures":["Qwen2ForCausalLM"],"vocab_size":10,"hidden_size":8,
      "intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":1,
      "sliding_window":4,"use_sliding_window":false})",
                             "c");
  ASSERT_THAT(q2, IsOk());
  EXPECT_TRUE(q2->attention_bias);
  EXPECT_FALSE(q2->sliding_window.has_value()) << "Qwen2 ignores sliding_window unless use_sliding_window";
  auto q3 = ParseModelConfig(R"({"architectures":["Qwen3ForCausalLM"],"vocab_size":10,"hidden_size":8,
      "intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":1,
      "head_dim":16,"tie_word_embeddings":true})",
                             "c");
  ASSERT_THAT(q3, IsOk());
  EXPECT_TRUE(q3->qk_norm);
  EXPECT_EQ(q3->head_dim, 16);
  EXPECT_TRUE(q3->tie_word_embeddings);
}

TEST(ModelConfigTest, MistralUsesSlidingWindow) {
  auto m = ParseModelConfig(R"({"architectures":["MistralForCausalLM"],"vocab_size":10,"hidden_size":8,
      "intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2,"sliding_window":4096})",
                            "c");
  ASSERT_THAT(m, IsOk());
  EXPECT_EQ(m->sliding_window.value_or(0), 4096);
  EXPECT_EQ(m->num_kv_heads, 2) << "defaults to num_attention_heads";
}

// Gemma 3's text model as the GGUF reader describes it (docs/gemma3.md): GeGLU, a scaled
// embedding, block output norms, five windowed layers to one full, the windowed RoPE base 10000.
TEST(ModelConfigTest, Gemma3WindowsFiveLayersInSix) {
  constexpr char kGemma[] = R"({"architectures":["Gemma3ForCausalLM"],"vocab_size":262144,"hidden_size":640,
      "intermediate_size":2048,"num_hidden_layers":18,"num_attention_heads":4,"num_key_value_heads":1,
      "head_dim":256,"rope_theta":1000000.0,"sliding_window":512,"use_sliding_window":true,
      "hidden_act":"gelu_pytorch_tanh"})";
  auto cfg = ParseModelConfig(kGemma, "gemma.gguf");
  ASSERT_THAT(cfg, IsOk());
  EXPECT_EQ(cfg->arch, Arch::kGemma3);
  EXPECT_EQ(cfg->hidden_act, Activation::kGeluTanh);
  EXPECT_TRUE(cfg->qk_norm && cfg->block_output_norms);
  EXPECT_FLOAT_EQ(static_cast<float>(cfg->embedding_scale), 25.298221588134766f);
  EXPECT_EQ(cfg->rope_local_theta, 10000.0);
  std::vector<int64_t> full;
  for (int64_t i = 0; i < cfg->num_layers; ++i) {
    if (!LayerIsWindowed(*cfg, i)) full.push_back(i);
  }
  EXPECT_THAT(full, ElementsAre(5, 11, 17));
  std::string other(kGemma);
  other.insert(other.size() - 1, R"(,"query_pre_attn_scalar":168)");
  EXPECT_THAT(ParseModelConfig(other, "gemma.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("query_pre_attn_scalar")));
}

TEST(ModelConfigTest, UnsupportedArchitectureListsSupported) {
  EXPECT_THAT(
      ParseModelConfig(R"({"architectures":["GPT2LMHeadModel"]})", "cfg.json"),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("'GPT2LMHeadModel' is not supported (supported: LlamaForCausalLM, "
                    "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM (GGUF))")));
}

TEST(ModelConfigTest, RejectsBadValuesNamingTheField) {
  const std::string base =
      R"("architectures":["LlamaForCausalLM"],"vocab_size":10,"intermediate_size":16,"num_hidden_layers":1,)";
  EXPECT_THAT(ParseModelConfig(
                  "{" + base + R"("hidden_size":8,"num_attention_heads":3,"num_key_value_heads":2})", "c"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("multiple of num_key_value_heads")));
  EXPECT_THAT(ParseModelConfig("{" + base + R"("num_attention_heads":2})", "c"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'hidden_size'")));
  EXPECT_THAT(
      ParseModelConfig(
          "{" + base + R"("hidden_size":8,"num_attention_heads":2,"rope_scaling":{"type":"yarn"}})", "c"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rope_scaling type 'yarn'")));
  EXPECT_THAT(
      ParseModelConfig("{" + base + R"("hidden_size":8,"num_attention_heads":2,"hidden_act":"gelu"})", "c"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hidden_act 'gelu'")));
  EXPECT_THAT(ParseModelConfig("not json", "c"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("c: not a JSON object")));
}

// transformers >= 5 writes rope_parameters (with rope_theta inside) and dtype.
TEST(ModelConfigTest, ReadsTransformers5RopeParametersAndDtype) {
  const std::string base =
      R"("architectures":["LlamaForCausalLM"],"vocab_size":10,"intermediate_size":16,"num_hidden_layers":1,)"
      R"("hidden_size":8,"num_attention_heads":2,"dtype":"bfloat16",)";
  auto cfg = ParseModelConfig("{" + base +
                                  R"("rope_parameters":{"rope_type":"llama3","factor":8.0,)"
                                  R"("low_freq_factor":1.0,"high_freq_factor":4.0,)"
                                  R"("original_max_position_embeddings":32,"rope_theta":500000.0}})",
                              "c");
  ASSERT_THAT(cfg, IsOk());
  ASSERT_TRUE(cfg->rope_scaling.has_value());
  EXPECT_EQ(cfg->rope_scaling->original_max_position_embeddings, 32);
  EXPECT_DOUBLE_EQ(cfg->rope_theta, 500000.0);
  EXPECT_EQ(cfg->torch_dtype, "bfloat16");
  auto plain =
      ParseModelConfig("{" + base + R"("rope_parameters":{"rope_type":"default","rope_theta":1e6}})", "c");
  ASSERT_THAT(plain, IsOk());
  EXPECT_FALSE(plain->rope_scaling.has_value());
  EXPECT_DOUBLE_EQ(plain->rope_theta, 1e6);
  EXPECT_THAT(ParseModelConfig("{" + base + R"("rope_parameters":{"rope_type":"yarn"}})", "c"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rope_parameters type 'yarn'")));
}

}  // namespace
}  // namespace shardlm
