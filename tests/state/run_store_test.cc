#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "state/store.h"
#include "tests/state/state_test_db.h"

namespace shardlm {
namespace {

class RunStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenStore(dir_);
    ThreadRow t;
    t.id = "thread_1";
    t.owner = "k";
    std::vector<MessageRow> none;
    ASSERT_TRUE(store_->CreateThread(&t, &none).ok());
  }
  RunRow Run(const std::string& id, const std::string& runner = "inst_a") {
    RunRow r;
    r.id = id;
    r.owner = "k";
    r.thread_id = "thread_1";
    r.assistant_id = "asst_1";
    r.runner = runner;
    return r;
  }
  TempStateDir dir_;
  std::unique_ptr<StateStore> store_;
  std::vector<MessageRow> none_;
};

TEST_F(RunStoreTest, AThreadHasOneActiveRunAtATime) {
  EXPECT_FALSE(store_->ActiveRun("k", "thread_1").value().has_value());
  RunRow first = Run("run_1");
  ASSERT_TRUE(store_->CreateRun(&first, &none_).ok());
  EXPECT_EQ(store_->ActiveRun("k", "thread_1").value(), "run_1");
  EXPECT_FALSE(store_->ActiveRun("j", "thread_1").value().has_value()) << "another owner's";
  RunRow second = Run("run_2");
  absl::Status st = store_->CreateRun(&second, &none_);
  ASSERT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_NE(st.message().find("already has an active run run_1"), std::string::npos) << st;
  MessageRow m;
  m.id = "msg_1";
  m.owner = "k";
  m.thread_id = "thread_1";
  m.role = "user";
  EXPECT_TRUE(absl::IsFailedPrecondition(store_->CreateMessage(&m)));
  // Once the first ends, the thread takes both.
  ASSERT_TRUE(store_->ClaimRun("run_1", "inst_a", 10).value());
  RunEnd end;
  end.owner = "k";
  end.run_id = "run_1";
  end.status = "completed";
  end.at = 11;
  ASSERT_TRUE(store_->FinishRun(end).ok());
  EXPECT_TRUE(store_->CreateMessage(&m).ok());
  EXPECT_TRUE(store_->CreateRun(&second, &none_).ok());
}

TEST_F(RunStoreTest, CancelStopsAQueuedRunAtOnceAndAsksARunningOneToStop) {
  RunRow r = Run("run_1");
  ASSERT_TRUE(store_->CreateRun(&r, &none_).ok());
  auto cancelled = store_->CancelRun("k", "thread_1", "run_1", 20);
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->status, "cancelled");
  EXPECT_EQ(cancelled->cancelled_at, 20);
  EXPECT_FALSE(store_->ClaimRun("run_1", "inst_a", 21).value()) << "a cancelled run is not claimed";
  auto again = store_->CancelRun("k", "thread_1", "run_1", 22);
  ASSERT_TRUE(absl::IsFailedPrecondition(again.status()));
  EXPECT_EQ(again.status().message(), "Cannot cancel run with status 'cancelled'.");

  RunRow running = Run("run_2");
  ASSERT_TRUE(store_->CreateRun(&running, &none_).ok());
  ASSERT_TRUE(store_->ClaimRun("run_2", "inst_a", 30).value());
  EXPECT_EQ(store_->CancelRun("k", "thread_1", "run_2", 31)->status, "cancelling");
  EXPECT_TRUE(absl::IsNotFound(store_->CancelRun("j", "thread_1", "run_2", 31).status()))
      << "another owner's run";
}

TEST_F(RunStoreTest, TheEndWritesTheReplyItsStepAndTheRunTogether) {
  RunRow r = Run("run_1");
  ASSERT_TRUE(store_->CreateRun(&r, &none_).ok());
  ASSERT_TRUE(store_->ClaimRun("run_1", "inst_a", 10).value());
  RunEnd end;
  end.owner = "k";
  end.run_id = "run_1";
  end.status = "incomplete";
  end.incomplete_reason = "max_completion_tokens";
  end.usage = "{\"prompt_tokens\":3}";
  end.at = 12;
  MessageRow reply;
  reply.id = "msg_r";
  reply.owner = "k";
  reply.thread_id = "thread_1";
  reply.role = "assistant";
  reply.run_id = "run_1";
  end.message = reply;
  RunStepRow step;
  step.id = "step_1";
  step.owner = "k";
  step.run_id = "run_1";
  step.thread_id = "thread_1";
  step.assistant_id = "asst_1";
  end.step = step;
  ASSERT_TRUE(store_->FinishRun(end).ok());
  auto run = store_->GetRun("k", "thread_1", "run_1");
  EXPECT_EQ(run->status, "incomplete");
  EXPECT_EQ(run->completed_at, 12);
  EXPECT_EQ(run->incomplete_reason, "max_completion_tokens");
  EXPECT_EQ(store_->ListMessages("k", "thread_1", std::string("run_1"), ListQuery())->rows.size(), 1u);
  EXPECT_EQ(store_->ListRunSteps("k", "thread_1", "run_1", ListQuery())->rows.at(0).id, "step_1");
  // A second end (a late writer) changes nothing.
  end.status = "failed";
  end.message.reset();
  end.step.reset();
  ASSERT_TRUE(store_->FinishRun(end).ok());
  EXPECT_EQ(store_->GetRun("k", "thread_1", "run_1")->status, "incomplete");
  // Deleting the thread takes its runs and steps.
  ASSERT_TRUE(store_->DeleteThread("k", "thread_1").ok());
  EXPECT_TRUE(absl::IsNotFound(store_->GetRun("k", "thread_1", "run_1").status()));
  EXPECT_TRUE(absl::IsNotFound(store_->GetRunStep("k", "thread_1", "run_1", "step_1").status()));
}

TEST_F(RunStoreTest, TheRunsOfAStoppedInstanceAreReaped) {
  ASSERT_TRUE(store_->Heartbeat("inst_dead", "host-a", 4242, 100).ok());
  ASSERT_TRUE(store_->Heartbeat("inst_live", "host-a", 4343, 100).ok());
  RunRow running = Run("run_1", "inst_dead");
  ASSERT_TRUE(store_->CreateRun(&running, &none_).ok());
  ASSERT_TRUE(store_->ClaimRun("run_1", "inst_dead", 101).value());
  // A second thread with a queued run of the dead instance, a third with the live one's.
  for (const char* id : {"thread_2", "thread_3"}) {
    ThreadRow t;
    t.id = id;
    t.owner = "k";
    ASSERT_TRUE(store_->CreateThread(&t, &none_).ok());
  }
  RunRow queued = Run("run_2", "inst_dead");
  queued.thread_id = "thread_2";
  ASSERT_TRUE(store_->CreateRun(&queued, &none_).ok());
  RunRow other = Run("run_3", "inst_live");
  other.thread_id = "thread_3";
  ASSERT_TRUE(store_->CreateRun(&other, &none_).ok());

  // Both heartbeats are fresh; the dead one's pid is gone on this host.
  auto alive = [](int64_t pid) { return pid == 4343; };
  auto taken = store_->ReapRuns("inst_me", "host-a", 105, 90, alive);
  ASSERT_TRUE(taken.ok()) << taken.status();
  ASSERT_EQ(taken->size(), 1u);
  EXPECT_EQ(taken->at(0).id, "run_2");
  auto failed = store_->GetRun("k", "thread_1", "run_1");
  EXPECT_EQ(failed->status, "failed");
  EXPECT_NE(failed->last_error->find("the server running this run stopped"), std::string::npos);
  EXPECT_EQ(store_->GetRun("k", "thread_2", "run_2")->runner, "inst_me");
  EXPECT_EQ(store_->GetRun("k", "thread_3", "run_3")->status, "queued")
      << "a live instance's run is left alone";
  // On another host only the heartbeat's age tells: fresh is alive, stale is not.
  EXPECT_TRUE(store_->ReapRuns("inst_me", "host-b", 106, 90, [](int64_t) { return false; })->empty());
  auto stale = store_->ReapRuns("inst_me", "host-b", 200, 150, [](int64_t) { return true; });
  ASSERT_EQ(stale->size(), 1u);
  EXPECT_EQ(stale->at(0).id, "run_3");
}

}  // namespace
}  // namespace shardlm
