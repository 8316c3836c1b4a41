// KvTurnCache alone (no engine: nothing to release): which part of a new prompt an entry's
// handle holds, its owner, expiry, replacement, the least recently used dropped first, and a
// lost handle forgotten only where it is still filed.
#include "coordinator/stateful/kv_turns.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

namespace shardlm {
namespace stateful {
namespace {

int64_t InAMinute() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
             .count() +
         60000;
}

TEST(KvTurnCacheTest, FindsTheLongestPrefixTheHandleHoldsLeavingOneTokenToPrefill) {
  KvTurnCache turns(nullptr);
  turns.Put("thread_1", "k", "h1", {1, 2, 3, 4, 5}, InAMinute());
  KvTurnCache::Use grown = turns.Find("thread_1", "k", {1, 2, 3, 4, 5, 6, 7});
  EXPECT_EQ(grown.handle, "h1");
  EXPECT_EQ(grown.length, 5);
  EXPECT_EQ(turns.Find("thread_1", "k", {1, 2, 9, 9}).length, 2) << "a history that differs after two tokens";
  EXPECT_EQ(turns.Find("thread_1", "k", {1, 2, 3}).length, 2) << "the prompt's last token is prefilled";
  EXPECT_TRUE(turns.Find("thread_1", "k", {7, 1, 2}).handle.empty()) << "nothing in common";
  EXPECT_TRUE(turns.Find("thread_1", "j", {1, 2, 3, 4, 5, 6}).handle.empty()) << "another owner's";
  EXPECT_TRUE(turns.Find("thread_2", "k", {1, 2, 3, 4, 5, 6}).handle.empty());
}

TEST(KvTurnCacheTest, AnExpiredHandleIsForgotten) {
  KvTurnCache turns(nullptr);
  turns.Put("thread_1", "k", "h1", {1, 2, 3}, /*expiry_ms=*/1);
  EXPECT_TRUE(turns.Find("thread_1", "k", {1, 2, 3, 4}).handle.empty());
  EXPECT_EQ(turns.size(), 0u);
}

TEST(KvTurnCacheTest, ALaterTurnReplacesTheEntryAndTheOldestGoFirst) {
  KvTurnCache turns(nullptr, /*max_entries=*/2);
  turns.Put("a", "k", "ha", {1}, InAMinute());
  turns.Put("b", "k", "hb", {2}, InAMinute());
  EXPECT_EQ(turns.Find("a", "k", {1, 5}).handle, "ha");  // a is now the most recently used
  turns.Put("c", "k", "hc", {3}, InAMinute());
  EXPECT_EQ(turns.size(), 2u);
  EXPECT_TRUE(turns.Find("b", "k", {2, 5}).handle.empty()) << "b, the least recently used, went";
  turns.Put("a", "k", "ha2", {1, 5, 6}, InAMinute());
  EXPECT_EQ(turns.Find("a", "k", {1, 5, 6, 7}).handle, "ha2");
  turns.ReleaseOldest("a");
  EXPECT_TRUE(turns.Find("c", "k", {3, 5}).handle.empty()) << "made room: c released, a kept";
  EXPECT_EQ(turns.size(), 1u);
  turns.Drop("a");
  EXPECT_EQ(turns.size(), 0u);
}

TEST(KvTurnCacheTest, ALostHandleIsForgottenOnlyWhereItIsStillFiled) {
  KvTurnCache turns(nullptr);
  turns.Put("thread_1", "k", "h1", {1, 2}, InAMinute());
  turns.Put("thread_1", "k", "h2", {1, 2, 3}, InAMinute());  // a turn that ended meanwhile
  turns.Lost("thread_1", "h1");
  EXPECT_EQ(turns.Find("thread_1", "k", {1, 2, 3, 4}).handle, "h2");
  turns.Lost("thread_1", "h2");
  EXPECT_TRUE(turns.Find("thread_1", "k", {1, 2, 3, 4}).handle.empty());
}

}  // namespace
}  // namespace stateful
}  // namespace shardlm
