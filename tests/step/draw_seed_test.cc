#include "step/draw_seed.h"

#include <gtest/gtest.h>

namespace shardlm {
namespace {

TEST(DrawSeedTest, DiffersAcrossTokensAndRequests) {
  EXPECT_NE(DrawSeed(1, 0), DrawSeed(1, 1));
  EXPECT_NE(DrawSeed(1, 0), DrawSeed(2, 0));
}

TEST(DrawSeedTest, IsStableAcrossPlatforms) {
  // Seeds reproduce a sample only if DrawSeed gives the same value everywhere:
  // pinned to values computed independently (Python, arbitrary precision
  // integers reduced mod 2^64) from the splitmix64 finaliser in draw_seed.cc.
  EXPECT_EQ(DrawSeed(5, 9), 0xa38f1014fa78eaedull);
  EXPECT_EQ(DrawSeed(0, 0), 0x6db6ca64564daeaaull);
}

}  // namespace
}  // namespace shardlm
