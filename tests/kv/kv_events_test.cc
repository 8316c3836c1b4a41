// The event log alone: consecutive blocks of one chain join one stored
// event, removals join, a clear makes what came before moot.
#include "kv/kv_events.h"

#include <gtest/gtest.h>

#include <vector>

#include "kv/block_allocator.h"

namespace shardlm {
namespace {

TEST(KvEventLogTest, AChainJoinsOneStoredEventAndAnotherChainStartsAnother) {
  KvEventLog log;
  const int32_t a[2] = {1, 2};
  const int32_t b[2] = {3, 4};
  log.Stored(10, std::nullopt, a, 2);
  log.Stored(11, 10, b, 2);  // follows 10: joins
  log.Stored(20, 99, a, 2);  // follows another block: a new event
  log.Removed(5);
  log.Removed(6);
  std::vector<KvEvent> events = log.Take();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].hashes, (std::vector<uint64_t>{10, 11}));
  EXPECT_FALSE(events[0].parent.has_value());
  EXPECT_EQ(events[0].tokens, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(events[1].parent, std::optional<uint64_t>(99));
  EXPECT_EQ(events[2].kind, KvEvent::Kind::kRemoved);
  EXPECT_EQ(events[2].hashes, (std::vector<uint64_t>{5, 6}));
  EXPECT_TRUE(log.empty());
}

TEST(KvEventLogTest, ClearingDropsWhatCameBefore) {
  KvEventLog log;
  const int32_t a[1] = {1};
  log.Stored(1, std::nullopt, a, 1);
  log.AllCleared();
  log.Stored(2, std::nullopt, a, 1);
  std::vector<KvEvent> events = log.Take();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, KvEvent::Kind::kAllCleared);
  EXPECT_EQ(events[1].hashes, (std::vector<uint64_t>{2}));
}

TEST(KvEventLogTest, TheAllocatorRecordsEvictionsOfPublishedBlocksOnly) {
  BlockAllocator alloc(2);
  KvEventLog log;
  alloc.set_event_log(&log);
  const int32_t t[2] = {5, 6};
  auto ids = alloc.Allocate(2);
  ASSERT_TRUE(ids.ok());
  EXPECT_TRUE(alloc.Publish((*ids)[0], 42, -1, t, 2));
  EXPECT_FALSE(alloc.Publish((*ids)[1], 42, -1, t, 2)) << "a hash already published keeps its first block";
  alloc.Release(*ids);
  EXPECT_TRUE(log.empty());
  ASSERT_TRUE(alloc.Allocate(2).ok());  // evicts the cached block; the other was free
  std::vector<KvEvent> events = log.Take();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, KvEvent::Kind::kRemoved);
  EXPECT_EQ(events[0].hashes, (std::vector<uint64_t>{42}));
}

}  // namespace
}  // namespace shardlm
