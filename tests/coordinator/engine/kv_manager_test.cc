// The KV manager alone (no model, no steps): the block ids a sequence holds
// through admission, growth, a step's publication, preemption and its end,
// with the prefix cache, copy-on-write from a handle, the handles' share cap,
// owners, release and a reset. Every test ends with every block back.
#include "coordinator/engine/kv_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/testing/status_matchers.h"

namespace shardlm {
namespace {

using ::shardlm::testing::IsOk;
using ::shardlm::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int32_t kBlockSize = 4;

KvManager Manager(int32_t num_blocks, double max_handle_share = 0.5) {
  KvManager::Options o;
  o.block_size = kBlockSize;
  o.max_handle_share = max_handle_share;
  return KvManager(num_blocks, o);
}

Sequence Seq(std::vector<int32_t> tokens, bool keep_handle = false, std::string owner = "") {
  Sequence s;
  s.tokens = std::move(tokens);
  s.request.prompt = s.tokens;
  s.request.keep_handle = keep_handle;
  s.request.owner = std::move(owner);
  return s;
}

std::vector<int32_t> Tokens(int32_t n, int32_t salt = 0) {
  std::vector<int32_t> t;
  for (int32_t i = 0; i < n; ++i) t.push_back(i * 7 + salt);
  return t;
}

// What the engine does around one step that computes all of `seq`'s tokens.
void RunWholePrompt(KvManager& kv, Sequence& seq) {
  kv.Admit(seq);
  kv.Grow(seq, static_cast<int32_t>(seq.tokens.size()));
  kv.EnterStep(seq);
  seq.num_computed = static_cast<int32_t>(seq.tokens.size());
  kv.Publish(seq);
}

TEST(KvManagerTest, ASecondSequenceReusesThePublishedFullBlocks) {
  KvManager kv = Manager(16);
  Sequence first = Seq(Tokens(10));
  RunWholePrompt(kv, first);
  EXPECT_EQ(first.kv.blocks.size(), 3u);  // 10 tokens in blocks of 4
  ASSERT_THAT(kv.Retire(first, absl::OkStatus()), IsOk());

  Sequence second = Seq(Tokens(10));
  kv.Admit(second);
  // Two full blocks cached; the last token is always computed again (its logits are needed).
  EXPECT_EQ(second.num_computed, 8);
  EXPECT_EQ(second.kv.cached_tokens, 8);
  EXPECT_EQ(kv.BlocksShort(second, 10), 1);
  kv.Grow(second, 10);
  ASSERT_THAT(kv.Retire(second, absl::OkStatus()), IsOk());
  EXPECT_EQ(kv.allocator().num_referenced(), 0);
  EXPECT_EQ(kv.FreeBlocks(), 16);

  Sequence other = Seq(Tokens(10, /*salt=*/1));
  kv.Admit(other);
  EXPECT_EQ(other.num_computed, 0);  // other tokens: no hit
  kv.Evict(other);
}

TEST(KvManagerTest, AHandleIsSharedAndItsPartlyFilledBlockCopiedOnWrite) {
  KvManager kv = Manager(16);
  Sequence prefill = Seq(Tokens(6), /*keep_handle=*/true, "alice");
  RunWholePrompt(kv, prefill);
  ASSERT_THAT(kv.Retire(prefill, absl::OkStatus()), IsOk());
  const std::string handle = prefill.kv.kept_handle;
  ASSERT_FALSE(handle.empty());
  absl::StatusOr<int64_t> length = kv.HandleLength(handle, "alice", "prefix handle");
  ASSERT_THAT(length, IsOk());
  EXPECT_EQ(*length, 6);
  EXPECT_EQ(kv.num_handles(), 1);

  Sequence next = Seq({});
  next.request.prefix_handle = handle;
  next.request.owner = "alice";
  next.tokens = kv.Attach(next, handle);
  EXPECT_EQ(next.tokens, Tokens(6));
  // All 6 computed: it starts at the 6th (5 computed), inside the handle's second block.
  EXPECT_EQ(next.num_computed, 5);
  ASSERT_EQ(next.kv.blocks.size(), 1u);  // the full block, shared
  EXPECT_GE(next.kv.cow_src, 0);         // the partly filled one, copied when it grows
  const int32_t source = next.kv.cow_src;
  next.tokens.push_back(99);
  kv.Grow(next, 7);
  KvManager::StepHold hold = kv.EnterStep(next);  // the step that copies it
  EXPECT_TRUE(hold.starts) << "its first step";
  ASSERT_EQ(hold.copies.size(), 1u);
  EXPECT_EQ(hold.copies[0].first, source);
  EXPECT_EQ(hold.copies[0].second, next.kv.blocks[1]);  // the copy is its own
  EXPECT_NE(next.kv.blocks[1], source);
  EXPECT_EQ(next.kv.cow_src, -1);
  EXPECT_TRUE(next.kv.copies.empty()) << "handed over to the step";
  kv.ReleaseCopied(hold.copies);  // the step copied it
  ASSERT_THAT(kv.Retire(next, absl::OkStatus()), IsOk());

  EXPECT_THAT(kv.ReleaseHandle(handle, "alice"), IsOk());
  EXPECT_EQ(kv.allocator().num_referenced(), 0);
  EXPECT_EQ(kv.FreeBlocks(), 16);
}

TEST(KvManagerTest, HandlesAreTheirOwnersAndGoneOnceReleased) {
  KvManager kv = Manager(16);
  Sequence s = Seq(Tokens(5), /*keep_handle=*/true, "alice");
  RunWholePrompt(kv, s);
  ASSERT_THAT(kv.Retire(s, absl::OkStatus()), IsOk());
  const std::string h = s.kv.kept_handle;
  EXPECT_THAT(kv.CheckHandle(h, "alice"), IsOk());
  EXPECT_THAT(kv.CheckHandle(h, "bob"), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  EXPECT_THAT(kv.ReleaseHandle(h, "bob"), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  EXPECT_THAT(kv.HandleLength(h, "bob", "prefix handle"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("prefix handle")));
  EXPECT_THAT(kv.ReleaseHandle(h, "alice"), IsOk());
  EXPECT_THAT(kv.ReleaseHandle(h, "alice"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("unknown, released or expired")));
  EXPECT_EQ(kv.allocator().num_referenced(), 0);
}

TEST(KvManagerTest, KeptHandlesMayPinOnlyTheirShare) {
  KvManager kv = Manager(8, /*max_handle_share=*/0.5);  // handles may pin 4 blocks
  EngineRequest small;
  small.prompt = Tokens(8);
  small.max_new_tokens = 0;
  small.keep_handle = true;
  EXPECT_THAT(kv.CheckShare(small), IsOk());  // 2 blocks
  EngineRequest big = small;
  big.prompt = Tokens(20);
  EXPECT_THAT(kv.CheckShare(big),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("--max-handle-share")));
  big.transient_handle = true;  // the service's own, short-lived: not counted
  EXPECT_THAT(kv.CheckShare(big), IsOk());

  // At the end the share is checked again: two handles of 2 blocks fit, a third does not.
  std::vector<std::string> handles;
  for (int i = 0; i < 3; ++i) {
    Sequence s = Seq(Tokens(8, /*salt=*/i), /*keep_handle=*/true);
    RunWholePrompt(kv, s);
    absl::Status kept = kv.Retire(s, absl::OkStatus());
    if (i < 2) {
      ASSERT_THAT(kept, IsOk());
      handles.push_back(s.kv.kept_handle);
    } else {
      EXPECT_THAT(kept, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("over the limit of 4")));
      EXPECT_TRUE(s.kv.kept_handle.empty());
    }
  }
  for (const std::string& h : handles) EXPECT_THAT(kv.ReleaseHandle(h, ""), IsOk());
  EXPECT_EQ(kv.allocator().num_referenced(), 0);
}

TEST(KvManagerTest, AHandleAttachedInPartSharesOnlyItsFirstTokens) {
  KvManager kv = Manager(16);
  Sequence prefill = Seq(Tokens(10), /*keep_handle=*/true, "alice");
  RunWholePrompt(kv, prefill);
  ASSERT_THAT(kv.Retire(prefill, absl::OkStatus()), IsOk());
  const std::string handle = prefill.kv.kept_handle;

  Sequence next = Seq({});
  next.request.prefix_handle = handle;
  next.request.prefix_length = 6;  // a history that differs from the handle after 6 tokens
  next.request.owner = "alice";
  next.tokens = kv.Attach(next, handle, next.request.prefix_length);
  EXPECT_EQ(next.tokens, Tokens(6));
  EXPECT_EQ(next.num_computed, 5) << "the 6th is computed again: the prompt follows it";
  ASSERT_EQ(next.kv.blocks.size(), 1u);  // the first full block, shared
  EXPECT_GE(next.kv.cow_src, 0) << "the block holding tokens 4 and 5 is copied, not shared";
  EngineRequest share = next.request;
  share.prompt = Tokens(2, /*salt=*/50);
  share.max_new_tokens = 0;
  share.keep_handle = true;
  EXPECT_THAT(kv.CheckShare(share), IsOk()) << "counted from the 6 tokens attached";
  kv.Evict(next);
  EXPECT_THAT(kv.ReleaseHandle(handle, "alice"), IsOk());
  EXPECT_EQ(kv.allocator().num_referenced(), 0);
}

TEST(KvManagerTest, AHandleKeptIfRoomUsesHalfTheShareAndPastItTheSequenceStillSucceeds) {
  KvManager kv = Manager(8, /*max_handle_share=*/0.5);  // handles may pin 4 blocks; these, 2
  EngineRequest big;
  big.prompt = Tokens(20);
  big.keep_handle = true;
  big.keep_handle_if_room = true;
  EXPECT_THAT(kv.CheckShare(big), IsOk()) << "not refused up front";
  std::vector<std::string> handles;
  for (int i = 0; i < 2; ++i) {
    Sequence s = Seq(Tokens(8, /*salt=*/i), /*keep_handle=*/true);
    s.request.keep_handle_if_room = true;
    RunWholePrompt(kv, s);
    ASSERT_THAT(kv.Retire(s, absl::OkStatus()), IsOk()) << "sequence " << i;
    EXPECT_EQ(s.kv.kept_handle.empty(), i == 1) << "the second finds its half full";
    if (!s.kv.kept_handle.empty()) handles.push_back(s.kv.kept_handle);
  }
  // The other half is still there for a handle a client asks for.
  Sequence asked = Seq(Tokens(8, /*salt=*/9), /*keep_handle=*/true);
  RunWholePrompt(kv, asked);
  ASSERT_THAT(kv.Retire(asked, absl::OkStatus()), IsOk());
  handles.push_back(asked.kv.kept_handle);
  EXPECT_EQ(kv.num_handles(), 2);
  for (const std::string& h : handles) EXPECT_THAT(kv.ReleaseHandle(h, ""), IsOk());
  EXPECT_EQ(kv.allocator().num_referenced(), 0);
}

TEST(KvManagerTest, AFailedSequenceKeepsNoHandleAndFreesItsBlocks) {
  KvManager kv = Manager(8);
  Sequence s = Seq(Tokens(6), /*keep_handle=*/true);
  RunWholePrompt(kv, s);
  EXPECT_THAT(kv.Retire(s, absl::CancelledError("request cancelled")),
              StatusIs(absl::StatusCode::kCancelled, ::testing::_));
  EXPECT_TRUE(s.kv.kept_handle.empty());
  EXPECT_EQ(kv.num_handles(), 0);
  EXPECT_EQ(kv.allocator().num_referenced(), 0);
}

TEST(KvManagerTest, PreemptionDropsEverythingButTheCache) {
  KvManager kv = Manager(8);
  Sequence s = Seq(Tokens(9));
  RunWholePrompt(kv, s);
  kv.Evict(s);
  EXPECT_TRUE(s.kv.blocks.empty());
  EXPECT_EQ(s.num_computed, 0);
  EXPECT_FALSE(s.kv.started);
  EXPECT_EQ(kv.allocator().num_referenced(), 0);
  EXPECT_EQ(kv.allocator().num_cached(), 2);  // its two full blocks, for when it comes back
  kv.Admit(s);
  EXPECT_EQ(s.num_computed, 8);
  ASSERT_THAT(kv.Retire(s, absl::OkStatus()), IsOk());
}

TEST(KvManagerTest, ResetLosesHandlesAndSaysWhy) {
  KvManager kv = Manager(8);
  Sequence s = Seq(Tokens(5), /*keep_handle=*/true);
  RunWholePrompt(kv, s);
  ASSERT_THAT(kv.Retire(s, absl::OkStatus()), IsOk());
  kv.Reset(12, "the worker group was formed again");
  EXPECT_EQ(kv.num_handles(), 0);
  EXPECT_EQ(kv.allocator().num_blocks(), 12);
  EXPECT_THAT(
      kv.CheckHandle(s.kv.kept_handle, ""),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("was lost: the worker group was formed again")));
}

TEST(KvManagerTest, TooSmallSaysWhatIsFreeAndWhatHandlesHold) {
  KvManager kv = Manager(4);
  EXPECT_THAT(kv.TooSmall(40), StatusIs(absl::StatusCode::kResourceExhausted,
                                        HasSubstr("needs 10 blocks of 4 tokens, 4 of 4 are free")));
}

}  // namespace
}  // namespace shardlm

namespace shardlm {
namespace {

KvManager RecordingManager(int32_t num_blocks) {
  KvManager::Options o;
  o.block_size = kBlockSize;
  o.record_events = true;
  return KvManager(num_blocks, o);
}

TEST(KvManagerEventsTest, PublishedBlocksAreStoredOnceAndEvictedOnesRemoved) {
  KvManager kv = RecordingManager(4);
  Sequence first = Seq(Tokens(10));
  RunWholePrompt(kv, first);
  std::vector<KvEvent> events = kv.TakeEvents();
  // Two full blocks (10 tokens in blocks of 4), one event: the second block's parent is the first.
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, KvEvent::Kind::kStored);
  EXPECT_FALSE(events[0].parent.has_value());
  ASSERT_EQ(events[0].hashes.size(), 2u);
  EXPECT_EQ(events[0].hashes, first.kv.hashes);
  EXPECT_EQ(events[0].tokens, std::vector<int32_t>(first.tokens.begin(), first.tokens.begin() + 8));
  ASSERT_THAT(kv.Retire(first, absl::OkStatus()), IsOk());
  EXPECT_TRUE(kv.TakeEvents().empty()) << "a released block stays cached: nothing removed";

  // The same prompt again: its blocks are found, not published again.
  Sequence again = Seq(Tokens(10));
  RunWholePrompt(kv, again);
  EXPECT_TRUE(kv.TakeEvents().empty());
  ASSERT_THAT(kv.Retire(again, absl::OkStatus()), IsOk());

  // Another prompt needs all four blocks: the two cached ones are evicted, oldest first.
  Sequence other = Seq(Tokens(16, /*salt=*/1));
  RunWholePrompt(kv, other);
  events = kv.TakeEvents();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, KvEvent::Kind::kRemoved);
  EXPECT_EQ(events[0].hashes.size(), 2u);
  EXPECT_EQ(events[1].kind, KvEvent::Kind::kStored);
  EXPECT_EQ(events[1].hashes.size(), 4u);
  ASSERT_THAT(kv.Retire(other, absl::OkStatus()), IsOk());

  kv.Reset(4, "test");
  events = kv.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, KvEvent::Kind::kAllCleared);
  // The new pool records too.
  Sequence after = Seq(Tokens(5));
  RunWholePrompt(kv, after);
  EXPECT_EQ(kv.TakeEvents().size(), 1u);
  ASSERT_THAT(kv.Retire(after, absl::OkStatus()), IsOk());
}

TEST(KvManagerEventsTest, NothingIsRecordedUnlessAsked) {
  KvManager kv = Manager(4);
  Sequence s = Seq(Tokens(10));
  RunWholePrompt(kv, s);
  EXPECT_TRUE(kv.TakeEvents().empty());
  ASSERT_THAT(kv.Retire(s, absl::OkStatus()), IsOk());
}

}  // namespace
}  // namespace shardlm
