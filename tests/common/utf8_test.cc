#include "common/utf8.h"

#include <gtest/gtest.h>

#include <random>

namespace shardlm {
namespace {

std::string Lossy(const std::string& b) {
  std::string out;
  EXPECT_EQ(DecodeUtf8Lossy(b, true, &out), b.size());
  return out;
}

TEST(Utf8Test, ReplacesMaximalInvalidSubpartsOnce) {
  EXPECT_EQ(Lossy("a\xE4\xBD"
                  "b"),
            "a\xEF\xBF\xBD"
            "b");                                            // truncated 3-byte char: one U+FFFD
  EXPECT_EQ(Lossy("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong: each byte invalid
  EXPECT_EQ(Lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(Lossy("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");                  // emoji intact
}

TEST(Utf8Test, HoldsIncompleteTailUntilMoreBytesArrive) {
  std::string out;
  EXPECT_EQ(DecodeUtf8Lossy("x\xF0\x9F\x98", false, &out), 1u);
  EXPECT_EQ(out, "x");
}

TEST(Utf8Test, StreamingInPiecesEqualsDecodingWhole) {
  std::mt19937 rng(11);
  const std::string alphabet[] = {"a",    " ",    "\xC3", "\xA9", "\xE4", "\xBD",
                                  "\xA0", "\xF0", "\x9F", "\x98", "\x80", "\xFF"};
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bytes;
    for (int i = 0; i < 12; ++i) bytes += alphabet[rng() % 12];
    std::string streamed, pending;
    for (char c : bytes) {
      pending += c;
      pending.erase(0, DecodeUtf8Lossy(pending, false, &streamed));
    }
    DecodeUtf8Lossy(pending, true, &streamed);
    ASSERT_EQ(streamed, Lossy(bytes));
    ASSERT_TRUE(IsValidUtf8(streamed));
  }
}

}  // namespace
}  // namespace shardlm
