#include "formats/gguf_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "common/status.h"
#include "formats/checkpoint.h"
#include "formats/model_config.h"
#include "formats/model_files.h"
#include "formats/quant_blocks.h"
#include "nlohmann/json.hpp"
#include "tests/testing/gguf_builder.h"
#include "tests/testing/status_matchers.h"

namespace shardlm {
namespace {

using ::shardlm::testing::GgufBuilder;
using ::shardlm::testing::IsOk;
using ::shardlm::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using json = nlohmann::json;

TEST(QuantBlocksTest, HalfAndBf16ToFloat) {
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(HalfToFloat(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_TRUE(std::isinf(HalfToFloat(0x7c00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_EQ(Bf16ToFloat32(0x3f80), 1.0f);
}

TEST(QuantBlocksTest, DequantizesEachFormat) {
  // d = 0.5 (f16 0x3800), m = -1 (f16 0xbc00).
  uint8_t q8[34] = {0x00, 0x38};
  for (int j = 0; j < 32; ++j) q8[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
  float out[32];
  DequantizeBlocks(BlockFormat::kQ8_0, q8, 32, out);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], 0.5f * (j - 16)) << j;

  uint8_t q4[18] = {0x00, 0x38};
  for (int j = 0; j < 16; ++j) q4[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  DequantizeBlocks(BlockFormat::kQ4_0, q4, 32, out);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.5f * (j - 8)) << j;
    EXPECT_EQ(out[j + 16], 0.5f * (15 - j - 8)) << j;
  }

  uint8_t q41[20] = {0x00, 0x38, 0x00, 0xbc};
  for (int j = 0; j < 16; ++j) q41[4 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  DequantizeBlocks(BlockFormat::kQ4_1, q41, 32, out);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.5f * j - 1.0f) << j;
    EXPECT_EQ(out[j + 16], 0.5f * (15 - j) - 1.0f) << j;
  }
  EXPECT_EQ(BlockLayoutOf(BlockFormat::kQ4_1).bytes, 20);
  EXPECT_STREQ(BlockFormatName(BlockFormat::kQ8_0), "Q8_0");
}

// A two-layer llama GGUF: hidden 64, 2 heads of 32, 1 KV head, FFN 64, vocab 4.
GgufBuilder TinyLlama() {
  GgufBuilder b;
  b.String("general.architecture", "llama")
      .U32("llama.block_count", 1)
      .U32("llama.context_length", 128)
      .U32("llama.embedding_length", 64)
      .U32("llama.feed_forward_length", 64)
      .U32("llama.attention.head_count", 2)
      .U32("llama.attention.head_count_kv", 1)
      .F32("llama.rope.freq_base", 100000.0f)
      .F32("llama.attention.layer_norm_rms_epsilon", 1e-5f)
      .U32("general.file_type", 3)
      .String("tokenizer.ggml.model", "gpt2")
      .String("tokenizer.ggml.pre", "smollm")
      .Strings("tokenizer.ggml.tokens", {"<|im_start|>", "a", "b", "ab"})
      .I32s("tokenizer.ggml.token_type", {3, 1, 1, 1})
      .Strings("tokenizer.ggml.merges", {"a b"})
      .U32("tokenizer.ggml.bos_token_id", 0)
      .U32("tokenizer.ggml.eos_token_id", 0)
      .String("tokenizer.chat_template", "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}");
  std::vector<float> q(64 * 64);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(i);
  b.Tensor("token_embd.weight", {64, 4}, GgmlType::kQ8_0, std::string(4 * 2 * 34, '\0'));
  b.Tensor("blk.0.attn_q.weight", {64, 64}, GgmlType::kF32, GgufBuilder::F32Bytes(q));
  b.Tensor("blk.0.ffn_down.weight", {64, 64}, GgmlType::kQ4_1, std::string(64 * 2 * 20, '\0'));
  b.Tensor("output_norm.weight", {64}, GgmlType::kF32, GgufBuilder::F32Bytes(std::vector<float>(64, 1.0f)));
  return b;
}

absl::StatusOr<GgufHeader> Parse(const std::string& image) {
  return ParseGguf(reinterpret_cast<const uint8_t*>(image.data()), image.size(), "t.gguf");
}

TEST(GgufModelTest, ConfigFromLlamaMetadata) {
  const std::string image = TinyLlama().Build();
  auto h = Parse(image);
  ASSERT_THAT(h, IsOk());
  auto text = GgufConfigJson(*h, "t.gguf");
  ASSERT_THAT(text, IsOk());
  auto cfg = ParseModelConfig(*text, "t.gguf");
  ASSERT_THAT(cfg, IsOk());
  EXPECT_EQ(cfg->arch, Arch::kLlama);
  EXPECT_EQ(cfg->hidden_size, 64);
  EXPECT_EQ(cfg->num_heads, 2);
  EXPECT_EQ(cfg->num_kv_heads, 1);
  EXPECT_EQ(cfg->head_dim, 32);
  EXPECT_EQ(cfg->vocab_size, 4);
  EXPECT_EQ(cfg->max_position_embeddings, 128);
  EXPECT_DOUBLE_EQ(cfg->rope_theta, 100000.0);
  EXPECT_NEAR(cfg->rms_norm_eps, 1e-5, 1e-12);
  EXPECT_TRUE(cfg->tie_word_embeddings);   // no output.weight
  EXPECT_EQ(cfg->torch_dtype, "float32");  // quantized: dequantized exactly into f32
  EXPECT_THAT(cfg->eos_token_ids, ElementsAre(0));
}

TEST(GgufModelTest, KQuantsAndQ5AreBlockViews) {
  GgufBuilder k;
  k.String("general.architecture", "qwen2")
      .Tensor("blk.0.ffn_down.weight", {256, 1}, GgmlType::kQ6_K, std::string(210, '\0'))
      .Tensor("blk.0.ffn_up.weight", {32, 1}, GgmlType::kQ5_0, std::string(22, '\0'));
  auto h = Parse(k.Build());
  ASSERT_THAT(h, IsOk());
  auto views = GgufTensorViews(*h, "t.gguf");
  ASSERT_THAT(views, IsOk());
  EXPECT_EQ(views->at("model.layers.0.mlp.down_proj.weight").block, BlockFormat::kQ6_K);
  EXPECT_EQ(views->at("model.layers.0.mlp.up_proj.weight").block, BlockFormat::kQ5_0);
  // A row that is not whole super-blocks is refused naming the tensor.
  GgufBuilder bad;
  bad.String("general.architecture", "qwen2")
      .Tensor("blk.0.ffn_down.weight", {100, 1}, GgmlType::kQ4_K, std::string(144, '\0'));
  EXPECT_THAT(Parse(bad.Build()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("blk.0.ffn_down.weight")));
}

TEST(GgufModelTest, RefusesWhatItCannotServe) {
  GgufBuilder other;
  other.String("general.architecture", "phi3");
  auto h = Parse(other.Build());
  ASSERT_THAT(h, IsOk());
  EXPECT_THAT(GgufConfigJson(*h, "t.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'phi3' is not supported (supported: llama, qwen2, qwen3, gemma3)")));
  GgufBuilder k;
  k.String("general.architecture", "qwen2")
      .Tensor("blk.0.ffn_down.weight", {32, 1}, GgmlType::kQ8_1, std::string(36, '\0'));
  h = Parse(k.Build());
  ASSERT_THAT(h, IsOk());
  EXPECT_THAT(
      GgufTensorViews(*h, "t.gguf"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("tensor 'blk.0.ffn_down.weight' is Q8_1; supported types: F32, F16, BF16, Q8_0, "
                         "Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K")));
}

TEST(GgufModelTest, TensorsUnderHuggingFaceNames) {
  const std::string image = TinyLlama().Build();
  auto h = Parse(image);
  ASSERT_THAT(h, IsOk());
  auto views = GgufTensorViews(*h, "t.gguf");
  ASSERT_THAT(views, IsOk());
  std::vector<std::string> names;
  for (const auto& [name, v] : *views) names.push_back(name);
  EXPECT_THAT(names, ElementsAre("model.embed_tokens.weight", "model.layers.0.mlp.down_proj.weight",
                                 "model.layers.0.self_attn.q_proj.weight", "model.norm.weight"));
  const TensorView& embed = views->at("model.embed_tokens.weight");
  EXPECT_THAT(embed.shape, ElementsAre(4, 64));  // PyTorch order
  EXPECT_EQ(embed.block, BlockFormat::kQ8_0);
  EXPECT_EQ(embed.rope_permuted_head_dim, 0);
  EXPECT_EQ(views->at("model.layers.0.self_attn.q_proj.weight").rope_permuted_head_dim, 32);
  EXPECT_EQ(views->at("model.layers.0.mlp.down_proj.weight").block, BlockFormat::kQ4_1);
}

TEST(GgufModelTest, TokenizerJsonAndConfig) {
  auto h = Parse(TinyLlama().Build());
  ASSERT_THAT(h, IsOk());
  auto text = GgufTokenizerJson(*h, "t.gguf");
  ASSERT_THAT(text, IsOk());
  json tok = json::parse(*text);
  EXPECT_EQ(tok["model"]["vocab"]["ab"], 3);
  EXPECT_EQ(tok["model"]["merges"][0], "a b");
  ASSERT_EQ(tok["added_tokens"].size(), 1u);
  EXPECT_EQ(tok["added_tokens"][0]["content"], "<|im_start|>");
  EXPECT_EQ(tok["added_tokens"][0]["special"], true);
  EXPECT_EQ(tok["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"], "\\p{N}");
  EXPECT_TRUE(tok["post_processor"].is_null());  // add_bos_token absent: false
  auto config = GgufTokenizerConfigJson(*h, "t.gguf");
  ASSERT_THAT(config, IsOk());
  json c = json::parse(*config);
  EXPECT_EQ(c["bos_token"], "<|im_start|>");
  EXPECT_EQ(c["chat_template"], "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}");

  GgufBuilder unknown = TinyLlama();
  unknown.String("tokenizer.ggml.pre", "deepseek-coder");  // a second key: refused as a duplicate
  EXPECT_FALSE(Parse(unknown.Build()).ok());
  GgufBuilder spm;
  spm.String("tokenizer.ggml.model", "llama").Strings("tokenizer.ggml.tokens", {"a"});
  h = Parse(spm.Build());
  ASSERT_THAT(h, IsOk());
  EXPECT_THAT(GgufTokenizerJson(*h, "t.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tokenizer.ggml.model 'llama' is not supported")));
  GgufBuilder none;
  h = Parse(none.Build());
  ASSERT_THAT(h, IsOk());
  EXPECT_THAT(GgufTokenizerJson(*h, "t.gguf"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no tokenizer")));
  GgufBuilder pre;
  pre.String("tokenizer.ggml.model", "gpt2")
      .String("tokenizer.ggml.pre", "deepseek-coder")
      .Strings("tokenizer.ggml.tokens", {"a"});
  h = Parse(pre.Build());
  ASSERT_THAT(h, IsOk());
  EXPECT_THAT(GgufTokenizerJson(*h, "t.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tokenizer.ggml.pre 'deepseek-coder' is not supported")));
}

// Through the file system: LoadModelConfig, Checkpoint::Open and the model-file helpers
// take a .gguf path wherever they take a directory.
TEST(GgufModelTest, OpensAsAModel) {
  const std::string path = ::testing::TempDir() + "/tiny-" + std::to_string(::getpid()) + ".gguf";
  ASSERT_THAT(WriteStringToFile(path, TinyLlama().Build()), IsOk());
  auto cfg = LoadModelConfig(path);
  ASSERT_THAT(cfg, IsOk());
  EXPECT_EQ(cfg->num_layers, 1);
  auto ckpt = Checkpoint::Open(path);
  ASSERT_THAT(ckpt, IsOk());
  EXPECT_TRUE((*ckpt)->Has("model.norm.weight"));
  EXPECT_THAT(ReadTokenizerJson(path), IsOk());
  EXPECT_THAT(ReadTokenizerConfigJson(path), IsOk());
  EXPECT_EQ(ModelDisplayName(path), "tiny-" + std::to_string(::getpid()));
  EXPECT_EQ(ModelDisplayName("/models/Llama-3-8B/"), "Llama-3-8B");
  std::filesystem::remove(path);
  EXPECT_THAT(ReadTokenizerJson("/nonexistent-dir"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("tokenizer.json")));
}

}  // namespace
}  // namespace shardlm
