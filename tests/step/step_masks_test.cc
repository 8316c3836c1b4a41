#include "step/step_masks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/testing/status_matchers.h"

namespace shardlm {
namespace {

using ::shardlm::testing::IsOk;
using ::shardlm::testing::StatusIs;
using ::testing::HasSubstr;

std::vector<SampleRow> Rows(std::vector<bool> follows) {
  std::vector<SampleRow> rows(follows.size());
  for (size_t i = 0; i < follows.size(); ++i) rows[i].mask_follows = follows[i];
  return rows;
}

TEST(PointRowsAtMasksTest, PointsEachWaitingRowAtItsMask) {
  std::vector<SampleRow> rows = Rows({true, false, true});
  const std::vector<RowMask> masks = {{0, {0x5u}}, {2, {}}};
  ASSERT_THAT(PointRowsAtMasks(masks, 64, rows), IsOk());
  EXPECT_TRUE(Allowed(rows[0], 0));
  EXPECT_FALSE(Allowed(rows[0], 1));
  EXPECT_TRUE(Allowed(rows[0], 2));
  EXPECT_FALSE(Allowed(rows[0], 40)) << "past the mask's words";
  EXPECT_TRUE(Allowed(rows[2], 40)) << "an empty mask allows every token";
}

TEST(PointRowsAtMasksTest, RefusesMasksThatDoNotMatchTheRows) {
  std::vector<SampleRow> rows = Rows({true, false});
  EXPECT_THAT(PointRowsAtMasks({{1, {}}}, 64, rows),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("row 1 of 2 does not wait")));
  EXPECT_THAT(PointRowsAtMasks({{0, {}}, {0, {}}}, 64, rows),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("row 0 twice")));
  EXPECT_THAT(PointRowsAtMasks({{0, {1u, 1u, 1u}}}, 64, rows),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("does not fit a vocabulary of 64")));
  EXPECT_THAT(PointRowsAtMasks({}, 64, rows),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("none for row 0")));
}

TEST(MaskMailboxTest, TakesWhatIsPutAndForgetsDroppedSteps) {
  MaskMailbox mailbox;
  auto never = [] { return false; };
  mailbox.Put({1, 7}, std::vector<RowMask>{{3, {1u}}});
  auto taken = mailbox.Take({1, 7}, never);
  ASSERT_THAT(taken, IsOk());
  ASSERT_EQ(taken->size(), 1u);
  EXPECT_EQ((*taken)[0].row, 3);

  mailbox.DropThrough({1, 8});
  mailbox.Put({1, 8}, std::vector<RowMask>{});  // late: its step was given up
  EXPECT_THAT(mailbox.Take({1, 8}, [] { return true; }),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("never came")));
  mailbox.Reset();  // a new group counts from 1 again
  mailbox.Put({1, 1}, absl::InternalError("unreadable masks"));
  EXPECT_THAT(mailbox.Take({1, 1}, never), StatusIs(absl::StatusCode::kInternal, HasSubstr("unreadable")));
}

TEST(MaskMailboxTest, TakeWaitsForMasksFromAnotherThread) {
  MaskMailbox mailbox;
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    mailbox.Put({2, 1}, std::vector<RowMask>{{0, {}}});
  });
  auto taken = mailbox.Take({2, 1}, [] { return false; });
  sender.join();
  EXPECT_THAT(taken, IsOk());
}

}  // namespace
}  // namespace shardlm
