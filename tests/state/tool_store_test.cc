// StateStore's function-tool path (docs/stateful_apis.md section 7): a generation that called
// functions leaves its run requires_action with an open tool_calls step; submitted outputs fill
// and complete the step and queue the run again, in one transaction; runs left waiting expire.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "state/store.h"
#include "tests/state/state_test_db.h"

namespace shardlm {
namespace {

class ToolStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenStore(dir_);
    ThreadRow t;
    t.id = "thread_1";
    t.owner = "k";
    std::vector<MessageRow> none;
    ASSERT_TRUE(store_->CreateThread(&t, &none).ok());
    RunRow r;
    r.id = "run_1";
    r.owner = "k";
    r.thread_id = "thread_1";
    r.assistant_id = "asst_1";
    r.runner = "inst_a";
    r.expires_at = 600;
    ASSERT_TRUE(store_->CreateRun(&r, &none).ok());
    ASSERT_TRUE(store_->ClaimRun("run_1", "inst_a", 10).value());
  }
  // The run's generation ends with one call.
  void EndWithCall(int64_t at) {
    RunEnd end;
    end.owner = "k";
    end.run_id = "run_1";
    end.status = "requires_action";
    end.required_action = "{\"type\":\"submit_tool_outputs\"}";
    end.expires_at = at + 600;
    end.at = at;
    RunStepRow step;
    step.id = "step_t";
    step.owner = "k";
    step.run_id = "run_1";
    step.thread_id = "thread_1";
    step.type = "tool_calls";
    step.status = "in_progress";
    step.step_details = "{\"tool_calls\":[]}";
    end.tool_step = step;
    ASSERT_TRUE(store_->FinishRun(end).ok());
  }
  ToolOutputsSubmit Submit(int64_t at) {
    return ToolOutputsSubmit{"k", "thread_1", "run_1", "inst_b", at, at + 600};
  }

  TempStateDir dir_;
  std::unique_ptr<StateStore> store_;
};

TEST_F(ToolStoreTest, OutputsCompleteTheStepAndQueueTheRun) {
  EndWithCall(20);
  auto run = store_->GetRun("k", "thread_1", "run_1");
  EXPECT_EQ(run->status, "requires_action");
  EXPECT_EQ(run->expires_at, 620);
  EXPECT_TRUE(run->required_action.has_value());
  EXPECT_EQ(store_->ActiveRun("k", "thread_1").value(), "run_1") << "a run waiting for outputs is active";
  EXPECT_TRUE(store_->ThreadToolSteps("k", "thread_1")->empty()) << "an open step is not in the prompt";

  auto done = store_->SubmitToolOutputs(Submit(30), [](const RunRow& r, const RunStepRow& s) {
    EXPECT_EQ(r.id, "run_1");
    EXPECT_EQ(s.id, "step_t");
    return absl::StatusOr<std::string>("{\"tool_calls\":[{\"output\":\"1\"}]}");
  });
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->first.status, "queued");
  EXPECT_EQ(done->first.runner, "inst_b");
  EXPECT_FALSE(done->first.required_action.has_value());
  EXPECT_EQ(done->second.status, "completed");
  auto steps = store_->ThreadToolSteps("k", "thread_1");
  ASSERT_EQ(steps->size(), 1u);
  EXPECT_EQ(steps->at(0).step_details, "{\"tool_calls\":[{\"output\":\"1\"}]}");

  // Not waiting any more: a second submit is refused, and changes nothing.
  auto again = store_->SubmitToolOutputs(
      Submit(31), [](const RunRow&, const RunStepRow&) { return absl::StatusOr<std::string>("{}"); });
  EXPECT_TRUE(absl::IsFailedPrecondition(again.status())) << again.status();
}

TEST_F(ToolStoreTest, ARefusedFillWritesNothing) {
  EndWithCall(20);
  auto refused = store_->SubmitToolOutputs(Submit(30), [](const RunRow&, const RunStepRow&) {
    return absl::StatusOr<std::string>(absl::InvalidArgumentError("tool_outputs: missing"));
  });
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status()));
  EXPECT_EQ(store_->GetRun("k", "thread_1", "run_1")->status, "requires_action");
  EXPECT_EQ(store_->GetRunStep("k", "thread_1", "run_1", "step_t")->status, "in_progress");
}

TEST_F(ToolStoreTest, ACancelAsTheCallsEndStopsTheRun) {
  ASSERT_EQ(store_->CancelRun("k", "thread_1", "run_1", 15)->status, "cancelling");
  EndWithCall(20);
  EXPECT_EQ(store_->GetRun("k", "thread_1", "run_1")->status, "cancelled");
  EXPECT_TRUE(store_->ListRunSteps("k", "thread_1", "run_1", ListQuery())->rows.empty())
      << "the calls are not asked for";
}

TEST_F(ToolStoreTest, RunsLeftWaitingExpireWithTheirStep) {
  EndWithCall(20);
  EXPECT_EQ(store_->ExpireRuns(620).value(), 0) << "not past expires_at yet";
  EXPECT_EQ(store_->ExpireRuns(621).value(), 1);
  EXPECT_EQ(store_->GetRun("k", "thread_1", "run_1")->status, "expired");
  auto step = store_->GetRunStep("k", "thread_1", "run_1", "step_t");
  EXPECT_EQ(step->status, "expired");
  EXPECT_EQ(step->expired_at, 621);
  EXPECT_FALSE(store_->ActiveRun("k", "thread_1").value().has_value());
}

TEST_F(ToolStoreTest, ACancelledWaitingRunCancelsItsStep) {
  EndWithCall(20);
  auto cancelled = store_->CancelRun("k", "thread_1", "run_1", 25);
  EXPECT_EQ(cancelled->status, "cancelled");
  EXPECT_FALSE(cancelled->required_action.has_value());
  EXPECT_EQ(store_->GetRunStep("k", "thread_1", "run_1", "step_t")->status, "cancelled");
}

}  // namespace
}  // namespace shardlm
