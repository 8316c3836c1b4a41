// Responses in the state store: a cancel marked in the store wins over the end its generation
// writes later (a background response cancelled from another serve, or after its serve died).
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "state/store.h"
#include "tests/state/state_test_db.h"

namespace shardlm {
namespace {

TEST(ResponseStoreTest, ACancelInTheStoreOutlivesTheLaterEnd) {
  TempStateDir dir;
  std::unique_ptr<StateStore> store = OpenStore(dir);
  ASSERT_NE(store, nullptr);
  ResponseRow r;
  r.id = "resp_bg";
  r.owner = "key-a";
  std::vector<ResponseItemRow> input;
  ASSERT_TRUE(store->CreateResponse(&r, &input).ok());

  EXPECT_FALSE(*store->CancelResponse("key-b", "resp_bg", 1001));  // another key's: untouched
  auto cancelled = store->CancelResponse("key-a", "resp_bg", 1001);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_TRUE(*cancelled);
  EXPECT_FALSE(*store->CancelResponse("key-a", "resp_bg", 1002));  // no longer in progress

  ResponseEnd end;
  end.owner = "key-a";
  end.response_id = "resp_bg";
  end.status = "completed";
  end.at = 1003;
  ASSERT_TRUE(store->FinishResponse(end).ok());
  auto stored = store->GetResponse("key-a", "resp_bg");
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->status, "cancelled");
  EXPECT_EQ(stored->completed_at.value_or(0), 1001);
}

}  // namespace
}  // namespace shardlm
