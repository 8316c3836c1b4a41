#include "state/store.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/state/state_test_db.h"

namespace shardlm {
namespace {

AssistantRow Assistant(const std::string& id, const std::string& owner) {
  AssistantRow a;
  a.id = id;
  a.owner = owner;
  a.created_at = 1000;
  a.model = "smollm2";
  a.name = "helper";
  a.temperature = 0.5;
  return a;
}

MessageRow Message(const std::string& id, const std::string& thread_id, const std::string& text) {
  MessageRow m;
  m.id = id;
  m.thread_id = thread_id;
  m.role = "user";
  m.content = absl::StrCat("[{\"type\":\"text\",\"text\":{\"value\":\"", text, "\",\"annotations\":[]}}]");
  return m;
}

std::vector<std::string> Ids(const ListPage<AssistantRow>& page) {
  std::vector<std::string> ids;
  for (const auto& r : page.rows) ids.push_back(r.id);
  return ids;
}

TEST(StateStoreTest, AssistantsRoundTripAndStayWithTheirOwner) {
  TempStateDir dir;
  auto store = OpenStore(dir);
  AssistantRow a = Assistant("asst_1", "key-a");
  ASSERT_TRUE(store->CreateAssistant(&a).ok());
  EXPECT_GT(a.seq, 0);
  auto got = store->GetAssistant("key-a", "asst_1");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->name, "helper");
  EXPECT_EQ(got->temperature, 0.5);
  EXPECT_FALSE(got->top_p.has_value());
  EXPECT_FALSE(got->description.has_value());

  auto other = store->GetAssistant("key-b", "asst_1");
  ASSERT_TRUE(absl::IsNotFound(other.status()));
  EXPECT_EQ(other.status().message(), "No assistant found with id 'asst_1'.");
  AssistantRow stolen = *got;
  stolen.owner = "key-b";
  EXPECT_TRUE(absl::IsNotFound(store->UpdateAssistant(stolen)));
  EXPECT_TRUE(absl::IsNotFound(store->DeleteAssistant("key-b", "asst_1")));
  auto b_list = store->ListAssistants("key-b", ListQuery());
  ASSERT_TRUE(b_list.ok());
  EXPECT_TRUE(b_list->rows.empty());

  got->name.reset();
  got->instructions = "Be brief.";
  ASSERT_TRUE(store->UpdateAssistant(*got).ok());
  auto updated = store->GetAssistant("key-a", "asst_1");
  EXPECT_FALSE(updated->name.has_value());
  EXPECT_EQ(updated->instructions, "Be brief.");
  ASSERT_TRUE(store->DeleteAssistant("key-a", "asst_1").ok());
  EXPECT_TRUE(absl::IsNotFound(store->GetAssistant("key-a", "asst_1").status()));
}

TEST(StateStoreTest, PagesEitherWayByCursor) {
  TempStateDir dir;
  auto store = OpenStore(dir);
  for (int i = 0; i < 45; ++i) {
    AssistantRow a = Assistant(absl::StrCat("asst_", 100 + i), "k");
    ASSERT_TRUE(store->CreateAssistant(&a).ok());
  }
  ListQuery q;  // newest first, 20 a page
  auto p1 = store->ListAssistants("k", q);
  ASSERT_TRUE(p1.ok());
  ASSERT_EQ(p1->rows.size(), 20u);
  EXPECT_TRUE(p1->has_more);
  EXPECT_EQ(p1->rows.front().id, "asst_144");
  EXPECT_EQ(p1->rows.back().id, "asst_125");
  q.after = p1->rows.back().id;
  auto p2 = store->ListAssistants("k", q);
  EXPECT_EQ(p2->rows.front().id, "asst_124");
  EXPECT_TRUE(p2->has_more);
  q.after = p2->rows.back().id;
  auto p3 = store->ListAssistants("k", q);
  ASSERT_EQ(p3->rows.size(), 5u);
  EXPECT_FALSE(p3->has_more);
  EXPECT_EQ(p3->rows.back().id, "asst_100");

  ListQuery asc;
  asc.ascending = true;
  asc.limit = 3;
  asc.after = "asst_110";
  EXPECT_EQ(Ids(*store->ListAssistants("k", asc)),
            (std::vector<std::string>{"asst_111", "asst_112", "asst_113"}));
  // "before" gives the page nearest the cursor, still in the list's order.
  ListQuery before;
  before.limit = 3;
  before.before = "asst_110";  // newest first: the three newer than 110, nearest it last
  auto pb = store->ListAssistants("k", before);
  EXPECT_EQ(Ids(*pb), (std::vector<std::string>{"asst_113", "asst_112", "asst_111"}));
  EXPECT_TRUE(pb->has_more);
  ListQuery edge;
  edge.limit = 45;
  auto all = store->ListAssistants("k", edge);
  EXPECT_EQ(all->rows.size(), 45u);
  EXPECT_FALSE(all->has_more);  // exactly a page: nothing beyond it

  ListQuery bad;
  bad.after = "asst_nope";
  auto refused = store->ListAssistants("k", bad);
  ASSERT_TRUE(absl::IsInvalidArgument(refused.status()));
  EXPECT_NE(refused.status().message().find("after"), std::string::npos);
  bad.after = "asst_100";  // an id of another owner's list is no cursor here either
  EXPECT_TRUE(absl::IsInvalidArgument(store->ListAssistants("other", bad).status()));
}

TEST(StateStoreTest, ThreadsKeepTheirMessagesInOrderAndTakeThemAlongWhenDeleted) {
  TempStateDir dir;
  auto store = OpenStore(dir);
  ThreadRow t;
  t.id = "thread_1";
  t.owner = "k";
  std::vector<MessageRow> first = {Message("msg_1", "thread_1", "one"), Message("msg_2", "thread_1", "two")};
  for (auto& m : first) m.owner = "k";
  ASSERT_TRUE(store->CreateThread(&t, &first).ok());
  MessageRow third = Message("msg_3", "thread_1", "three");
  third.owner = "k";
  ASSERT_TRUE(store->CreateMessage(&third).ok());
  EXPECT_EQ(store->GetThread("k", "thread_1")->version, 1);

  ListQuery asc;
  asc.ascending = true;
  auto page = store->ListMessages("k", "thread_1", std::nullopt, asc);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->rows.size(), 3u);
  EXPECT_EQ(page->rows[0].id, "msg_1");
  EXPECT_EQ(page->rows[2].id, "msg_3");
  EXPECT_TRUE(store->ListMessages("k", "thread_1", std::string("run_x"), asc)->rows.empty());

  // Another owner can neither see nor add to the thread.
  EXPECT_TRUE(absl::IsNotFound(store->ListMessages("j", "thread_1", std::nullopt, asc).status()));
  MessageRow intruder = Message("msg_4", "thread_1", "hi");
  intruder.owner = "j";
  EXPECT_TRUE(absl::IsNotFound(store->CreateMessage(&intruder)));
  EXPECT_TRUE(absl::IsNotFound(store->GetMessage("j", "thread_1", "msg_1").status()));

  auto modified = store->UpdateMessageMetadata("k", "thread_1", "msg_2", "{\"a\":\"b\"}");
  ASSERT_TRUE(modified.ok());
  EXPECT_EQ(modified->metadata, "{\"a\":\"b\"}");
  ASSERT_TRUE(store->DeleteMessage("k", "thread_1", "msg_1").ok());
  EXPECT_EQ(store->GetThread("k", "thread_1")->version, 2);
  EXPECT_TRUE(absl::IsNotFound(store->DeleteMessage("k", "thread_1", "msg_1")));

  ASSERT_TRUE(store->DeleteThread("k", "thread_1").ok());
  EXPECT_TRUE(absl::IsNotFound(store->GetMessage("k", "thread_1", "msg_2").status()));
  EXPECT_TRUE(absl::IsNotFound(store->ListMessages("k", "thread_1", std::nullopt, asc).status()));
}

TEST(StateStoreTest, ObjectsOutliveTheProcessThatWroteThem) {
  TempStateDir dir;
  {
    auto store = OpenStore(dir);
    AssistantRow a = Assistant("asst_kept", "k");
    ASSERT_TRUE(store->CreateAssistant(&a).ok());
    ThreadRow t;
    t.id = "thread_kept";
    t.owner = "k";
    t.metadata = "{\"user\":\"x\"}";
    std::vector<MessageRow> none;
    ASSERT_TRUE(store->CreateThread(&t, &none).ok());
  }
  auto reopened = OpenStore(dir, 5000);
  EXPECT_TRUE(reopened->GetAssistant("k", "asst_kept").ok());
  EXPECT_EQ(reopened->GetThread("k", "thread_kept")->metadata, "{\"user\":\"x\"}");
  // The counter goes on where it stopped: a new object lists after the old ones.
  AssistantRow later = Assistant("asst_later", "k");
  ASSERT_TRUE(reopened->CreateAssistant(&later).ok());
  EXPECT_EQ(reopened->ListAssistants("k", ListQuery())->rows.front().id, "asst_later");
}

}  // namespace
}  // namespace shardlm
