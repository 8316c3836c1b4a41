// Scheduler policy on a fake block space: queue order, admission limits,
// preemption order, backpressure and the static baseline.
#include "coordinator/engine/scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <vector>

namespace shardlm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct FakeSeq : SchedSeq {
  int32_t len = 0;
  int32_t blocks = 0;
  int32_t length() const override { return len; }
};

// Blocks of kBlock tokens; Admit takes `cached[id]` leading tokens from a prefix cache.
class FakeKv : public KvSpace {
 public:
  static constexpr int32_t kBlock = 4;
  explicit FakeKv(int32_t blocks) : free_(blocks) {}
  void Admit(SchedSeq& s) override {
    auto& seq = static_cast<FakeSeq&>(s);
    auto it = cached.find(seq.id);
    if (it == cached.end() || seq.num_computed > 0 || seq.blocks > 0) return;
    seq.blocks = it->second / kBlock;
    seq.num_computed = seq.blocks * kBlock;
    free_ -= seq.blocks;
    ++admits;
  }
  int32_t BlocksShort(const SchedSeq& s, int32_t tokens) const override {
    return std::max(0, (tokens + kBlock - 1) / kBlock - static_cast<const FakeSeq&>(s).blocks);
  }
  int32_t FreeBlocks() const override { return free_; }
  void Grow(SchedSeq& s, int32_t tokens) override {
    const int32_t need = BlocksShort(s, tokens);
    ASSERT_LE(need, free_);
    free_ -= need;
    static_cast<FakeSeq&>(s).blocks += need;
  }
  void Evict(SchedSeq& s) override {
    auto& seq = static_cast<FakeSeq&>(s);
    free_ += seq.blocks;
    seq.blocks = 0;
    seq.num_computed = 0;
    evicted.push_back(seq.id);
  }
  std::map<int64_t, int32_t> cached;
  std::vector<int64_t> evicted;
  int admits = 0;

 private:
  int32_t free_;
};

class SchedulerTest : public ::testing::Test {
 protected:
  FakeSeq* Add(int32_t len) {
    auto s = std::make_unique<FakeSeq>();
    s->id = next_id_++;
    s->len = len;
    seqs_.push_back(std::move(s));
    return seqs_.back().get();
  }
  // Applies a step: the scheduled tokens are computed; a sequence whose
  // tokens are all computed samples one more.
  static void Apply(const std::vector<Scheduler::Work>& work) {
    for (const auto& w : work) {
      auto* s = static_cast<FakeSeq*>(w.seq);
      s->num_computed += w.tokens;
      if (s->num_computed == s->len) ++s->len;
    }
  }
  static std::vector<int64_t> Ids(const std::vector<Scheduler::Work>& work) {
    std::vector<int64_t> ids;
    for (const auto& w : work) ids.push_back(w.seq->id);
    return ids;
  }
  static std::vector<int64_t> Ids(const std::deque<SchedSeq*>& q) {
    std::vector<int64_t> ids;
    for (const SchedSeq* s : q) ids.push_back(s->id);
    return ids;
  }

  std::vector<std::unique_ptr<FakeSeq>> seqs_;
  int64_t next_id_ = 1;
};

TEST_F(SchedulerTest, AdmitsFirstComeFirstServedUpToMaxNumSeqs) {
  Scheduler::Options o;
  o.max_num_seqs = 2;
  Scheduler sched(o);
  FakeKv kv(100);
  std::vector<FakeSeq*> s;
  for (int i = 0; i < 4; ++i) {
    s.push_back(Add(6));
    ASSERT_TRUE(sched.Enqueue(s.back()).ok());
  }
  EXPECT_EQ(sched.queued_tokens(), 24);
  auto work = sched.Schedule(kv);
  EXPECT_THAT(Ids(work), ElementsAre(1, 2));
  EXPECT_EQ(work[0].tokens, 6);
  EXPECT_THAT(Ids(sched.waiting()), ElementsAre(3, 4));
  EXPECT_EQ(sched.queued_tokens(), 12);
  Apply(work);
  sched.Remove(s[0]);  // finished: 3 takes its place, 4 still waits
  work = sched.Schedule(kv);
  EXPECT_THAT(Ids(work), ElementsAre(2, 3));
  EXPECT_EQ(work[0].tokens, 1);  // the decode comes first
  EXPECT_EQ(work[1].tokens, 6);
}

TEST_F(SchedulerTest, TheHeadIsNeverSkippedForASmallerRequestBehindIt) {
  Scheduler sched(Scheduler::Options{});
  FakeKv kv(3);             // 12 tokens
  FakeSeq* big = Add(10);   // 3 blocks
  FakeSeq* huge = Add(12);  // 3 blocks, waits behind `big`
  FakeSeq* small = Add(2);  // would fit, but arrived last
  for (FakeSeq* x : {big, huge, small}) ASSERT_TRUE(sched.Enqueue(x).ok());
  auto work = sched.Schedule(kv);
  EXPECT_THAT(Ids(work), ElementsAre(1));
  EXPECT_THAT(Ids(sched.waiting()), ElementsAre(2, 3));
}

TEST_F(SchedulerTest, ChunksLongPromptsToTheTokenBudgetAfterDecodes) {
  Scheduler::Options o;
  o.max_batch_tokens = 8;
  Scheduler sched(o);
  FakeKv kv(100);
  FakeSeq* a = Add(3);
  ASSERT_TRUE(sched.Enqueue(a).ok());
  Apply(sched.Schedule(kv));  // a decodes from now on
  FakeSeq* b = Add(20);
  b->max_chunk = 5;  // e.g. a scoring request
  FakeSeq* c = Add(20);
  ASSERT_TRUE(sched.Enqueue(b).ok());
  ASSERT_TRUE(sched.Enqueue(c).ok());
  auto work = sched.Schedule(kv);
  ASSERT_THAT(Ids(work), ElementsAre(1, 2, 3));
  EXPECT_EQ(work[0].tokens, 1);
  EXPECT_EQ(work[1].tokens, 5);
  EXPECT_EQ(work[2].tokens, 2);  // what the budget leaves
}

TEST_F(SchedulerTest, PreemptsNewestFirstAndNeverAnOlderSequence) {
  Scheduler sched(Scheduler::Options{});
  FakeKv kv(6);  // 24 tokens
  FakeSeq* a = Add(8);
  FakeSeq* b = Add(7);
  FakeSeq* c = Add(7);
  for (FakeSeq* x : {a, b, c}) ASSERT_TRUE(sched.Enqueue(x).ok());
  Apply(sched.Schedule(kv));  // 2 blocks each, all free blocks used
  ASSERT_EQ(kv.FreeBlocks(), 0);
  // a (9 tokens) needs a third block: c, the newest, goes back to the queue.
  FakeSeq* d = Add(2);  // arrived after c
  ASSERT_TRUE(sched.Enqueue(d).ok());
  auto work = sched.Schedule(kv);
  EXPECT_THAT(kv.evicted, ElementsAre(3));
  EXPECT_EQ(sched.preemptions(), 1);
  EXPECT_THAT(Ids(work), ElementsAre(1, 2));  // no admission in a step that preempted
  EXPECT_THAT(Ids(sched.waiting()), ElementsAre(3, 4)) << "c is ahead of d, which arrived after it";
  EXPECT_EQ(c->len, 8) << "c keeps its sampled token";
}

TEST_F(SchedulerTest, ANewerSequenceSitsOutRatherThanPreemptAnOlderOne) {
  Scheduler sched(Scheduler::Options{});
  FakeKv kv(4);
  FakeSeq* a = Add(7);
  FakeSeq* b = Add(8);
  ASSERT_TRUE(sched.Enqueue(a).ok());
  ASSERT_TRUE(sched.Enqueue(b).ok());
  Apply(sched.Schedule(kv));  // 2 blocks each; a has 8 tokens, b 9
  ASSERT_EQ(kv.FreeBlocks(), 0);
  // b needs a third block and only a, older, could give one.
  auto work = sched.Schedule(kv);
  EXPECT_THAT(Ids(work), ElementsAre(1)) << "b sits out; a is never preempted by b";
  EXPECT_TRUE(kv.evicted.empty());
  EXPECT_EQ(sched.preemptions(), 0);
}

TEST_F(SchedulerTest, APreemptedHeadMayPreemptNewerRunningSequences) {
  Scheduler sched(Scheduler::Options{});
  FakeKv kv(4);
  FakeSeq* a = Add(8);
  FakeSeq* b = Add(8);
  ASSERT_TRUE(sched.Enqueue(a).ok());
  ASSERT_TRUE(sched.Enqueue(b).ok());
  Apply(sched.Schedule(kv));  // 2 blocks each
  // a was preempted (by an older sequence since finished) with 12 tokens.
  sched.Remove(a);
  kv.Evict(*a);
  a->len = 12;
  ASSERT_TRUE(sched.Enqueue(a).ok());
  b->len = 17;  // b now needs 3 more blocks than it holds; 2 are free: it sits out
  auto work = sched.Schedule(kv);
  // a, at the head and older than b, takes b's blocks.
  EXPECT_THAT(kv.evicted, ElementsAre(1, 2));
  EXPECT_THAT(Ids(work), ElementsAre(1));
  EXPECT_EQ(work[0].tokens, 12);
  EXPECT_THAT(Ids(sched.waiting()), ElementsAre(2));
}

TEST_F(SchedulerTest, AFullQueueRefusesNewRequestsNamingTheLimit) {
  Scheduler::Options o;
  o.max_queued_requests = 2;
  o.max_queued_tokens = 30;
  Scheduler sched(o);
  ASSERT_TRUE(sched.Enqueue(Add(10)).ok());
  ASSERT_TRUE(sched.Enqueue(Add(10)).ok());
  absl::Status st = sched.Enqueue(Add(1));
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(st.message()), HasSubstr("--max-queued-requests"));
  FakeKv kv(100);
  sched.Schedule(kv);  // both admitted: the queue is empty
  ASSERT_TRUE(sched.Enqueue(Add(20)).ok());
  st = sched.Enqueue(Add(11));
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(st.message()), HasSubstr("--max-queued-tokens"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("30"));
}

TEST_F(SchedulerTest, StaticPolicyRunsABatchToCompletionBeforeTheNext) {
  Scheduler::Options o;
  o.policy = Scheduler::Policy::kStatic;
  o.max_num_seqs = 2;
  Scheduler sched(o);
  FakeKv kv(100);
  std::vector<FakeSeq*> s;
  for (int i = 0; i < 3; ++i) {
    s.push_back(Add(4));
    ASSERT_TRUE(sched.Enqueue(s.back()).ok());
  }
  Apply(sched.Schedule(kv));
  sched.Remove(s[0]);  // one of the batch finished: no one joins until both have
  auto work = sched.Schedule(kv);
  EXPECT_THAT(Ids(work), ElementsAre(2));
  Apply(work);
  sched.Remove(s[1]);
  work = sched.Schedule(kv);
  EXPECT_THAT(Ids(work), ElementsAre(3));
  Scheduler::Policy p;
  EXPECT_TRUE(Scheduler::ParsePolicy("static", &p).ok());
  EXPECT_EQ(Scheduler::ParsePolicy("fifo", &p).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SchedulerTest, AdmissionUsesThePrefixCacheAndGivesItBackWhenTheHeadWaits) {
  Scheduler sched(Scheduler::Options{});
  FakeKv kv(3);
  FakeSeq* a = Add(9);  // 8 tokens cached: computes 1
  kv.cached[a->id] = 8;
  ASSERT_TRUE(sched.Enqueue(a).ok());
  auto work = sched.Schedule(kv);
  ASSERT_THAT(Ids(work), ElementsAre(1));
  EXPECT_EQ(work[0].tokens, 1);
  FakeSeq* b = Add(8);
  kv.cached[b->id] = 4;  // 1 block lent, 1 more needed: none free
  ASSERT_TRUE(sched.Enqueue(b).ok());
  Apply(work);
  work = sched.Schedule(kv);
  EXPECT_THAT(Ids(work), ElementsAre(1));
  EXPECT_THAT(kv.evicted, ElementsAre(2)) << "the lent block goes back while b waits";
  EXPECT_EQ(kv.FreeBlocks(), 0);
}

TEST_F(SchedulerTest, ATimeBudgetCutsDeeperChunksShorter) {
  Scheduler::Options o;
  o.max_batch_tokens = 100000;
  Scheduler sched(o);
  FakeKv kv(100000);
  // 1 ms a token, 1 us a key, 250 ms a step.
  sched.LimitStepTime({0.25, {1e-3, 1e-6}});
  FakeSeq* a = Add(8000);
  ASSERT_TRUE(sched.Enqueue(a).ok());
  auto work = sched.Schedule(kv);
  ASSERT_THAT(Ids(work), ElementsAre(1));
  // t tokens from 0 cost 1e-3 t + 1e-6 t (t + 1) / 2 <= 0.25: t = 224.
  EXPECT_EQ(work[0].tokens, 224);
  a->num_computed = 4000;
  work = sched.Schedule(kv);
  ASSERT_THAT(Ids(work), ElementsAre(1));
  // From 4000, a token costs at least 5 ms: 49 tokens fit.
  EXPECT_EQ(work[0].tokens, 49);
  // The budget is spent on the chunk: what it says it costs fits.
  const double t = work[0].tokens;
  EXPECT_LE(1e-3 * t + 1e-6 * (t * 4000 + t * (t + 1) / 2), 0.25);
  const double t1 = t + 1;
  EXPECT_GT(1e-3 * t1 + 1e-6 * (t1 * 4000 + t1 * (t1 + 1) / 2), 0.25);
}

TEST_F(SchedulerTest, ATimeBudgetKeepsDecodesAndAdvancesOnePromptAtLeast) {
  Scheduler::Options o;
  o.max_batch_tokens = 100000;
  Scheduler sched(o);
  FakeKv kv(100000);
  std::vector<FakeSeq*> decoding;
  for (int i = 0; i < 3; ++i) {
    decoding.push_back(Add(10));
    ASSERT_TRUE(sched.Enqueue(decoding.back()).ok());
  }
  Apply(sched.Schedule(kv));  // their prompts: now each decodes
  FakeSeq* p1 = Add(1000);
  FakeSeq* p2 = Add(1000);
  ASSERT_TRUE(sched.Enqueue(p1).ok());
  ASSERT_TRUE(sched.Enqueue(p2).ok());
  // Each decode alone costs more than the step's budget.
  sched.LimitStepTime({0.01, {0.02, 0}});
  auto work = sched.Schedule(kv);
  ASSERT_THAT(Ids(work), ElementsAre(1, 2, 3, 4));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(work[i].tokens, 1);
  EXPECT_EQ(work[3].tokens, Scheduler::kMinChunkTokens) << "the first prompt chunk still advances";
  EXPECT_THAT(Ids(sched.waiting()), ElementsAre(5)) << "no time left for the second prompt";
}

TEST_F(SchedulerTest, PromptChunksShareTheTimeLeft) {
  Scheduler::Options o;
  o.max_batch_tokens = 100000;
  Scheduler sched(o);
  FakeKv kv(100000);
  sched.LimitStepTime({0.25, {1e-3, 1e-6}});
  FakeSeq* a = Add(100);
  FakeSeq* b = Add(1000);
  ASSERT_TRUE(sched.Enqueue(a).ok());
  ASSERT_TRUE(sched.Enqueue(b).ok());
  auto work = sched.Schedule(kv);
  ASSERT_THAT(Ids(work), ElementsAre(1, 2));
  // a's 100 tokens cost 0.1 + 1e-6 * 5050 = 0.10505 s; b gets the 0.14495 s left: 135 tokens.
  EXPECT_EQ(work[0].tokens, 100);
  EXPECT_EQ(work[1].tokens, 135);
}

TEST_F(SchedulerTest, DeepDecodesSpendTheTimeOfAPromptChunk) {
  Scheduler::Options o;
  o.max_batch_tokens = 100000;
  Scheduler sched(o);
  FakeKv kv(100000);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(sched.Enqueue(Add(2000)).ok());
  Apply(sched.Schedule(kv));  // their prompts: now each decodes at position 2000
  FakeSeq* p = Add(1000);
  ASSERT_TRUE(sched.Enqueue(p).ok());
  sched.LimitStepTime({0.25, {1e-3, 1e-6}});
  auto work = sched.Schedule(kv);
  ASSERT_THAT(Ids(work), ElementsAre(1, 2, 3, 4));
  // Each decode costs 1e-3 + 1e-6 * 2001 s; the prompt gets what is left: 217 tokens, not 224.
  EXPECT_EQ(work[3].tokens, 217);
}

TEST_F(SchedulerTest, StaticPolicyBatchesWhatTheTimeBudgetLeavesOut) {
  Scheduler::Options o;
  o.policy = Scheduler::Policy::kStatic;
  o.max_num_seqs = 4;
  o.max_batch_tokens = 100000;
  Scheduler sched(o);
  FakeKv kv(100000);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(sched.Enqueue(Add(1000)).ok());
  sched.LimitStepTime({0.25, {1e-3, 0}});
  auto work = sched.Schedule(kv);
  ASSERT_THAT(Ids(work), ElementsAre(1));
  EXPECT_EQ(work[0].tokens, 250);
  EXPECT_EQ(sched.running().size(), 4u) << "the rest join the batch and compute from the next step";
  EXPECT_THAT(Ids(sched.waiting()), ElementsAre(5));
}

TEST_F(SchedulerTest, RemoveTakesQueuedAndRunningSequencesOut) {
  Scheduler::Options o;
  o.max_num_seqs = 1;
  Scheduler sched(o);
  FakeKv kv(100);
  FakeSeq* a = Add(5);
  FakeSeq* b = Add(5);
  ASSERT_TRUE(sched.Enqueue(a).ok());
  ASSERT_TRUE(sched.Enqueue(b).ok());
  sched.Schedule(kv);
  sched.Remove(b);
  EXPECT_EQ(sched.queued_tokens(), 0);
  sched.Remove(a);
  EXPECT_TRUE(sched.Idle());
}

}  // namespace
}  // namespace shardlm
