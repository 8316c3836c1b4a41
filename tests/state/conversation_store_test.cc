// Conversations and their items in the state store, and a response's turn added to its
// conversation in the transaction that ends the response.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "state/store.h"
#include "tests/state/state_test_db.h"

namespace shardlm {
namespace {

ConversationItemRow ConversationItem(const std::string& id, const std::string& conversation_id) {
  ConversationItemRow item;
  item.id = id;
  item.owner = "key-a";
  item.created_at = 1000;
  item.conversation_id = conversation_id;
  item.item = absl::StrCat("{\"id\":\"", id, "\",\"type\":\"message\"}");
  return item;
}

std::vector<std::string> ItemIds(const std::vector<ConversationItemRow>& rows) {
  std::vector<std::string> ids;
  for (const auto& r : rows) ids.push_back(r.id);
  return ids;
}

class ConversationStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenStore(dir_);
    ASSERT_NE(store_, nullptr);
    ConversationRow c;
    c.id = "conv_1";
    c.owner = "key-a";
    c.created_at = 1000;
    std::vector<ConversationItemRow> items = {ConversationItem("msg_1", "conv_1"),
                                              ConversationItem("msg_2", "conv_1")};
    ASSERT_TRUE(store_->CreateConversation(&c, &items).ok());
  }

  TempStateDir dir_;
  std::unique_ptr<StateStore> store_;
};

TEST_F(ConversationStoreTest, ItemsKeepTheirOrderAndStayWithTheirOwner) {
  std::vector<ConversationItemRow> more = {ConversationItem("msg_3", "conv_1")};
  ASSERT_TRUE(store_->AddConversationItems("key-a", "conv_1", &more).ok());
  auto history = store_->ConversationHistory("key-a", "conv_1");
  ASSERT_TRUE(history.ok()) << history.status();
  EXPECT_EQ(ItemIds(*history), (std::vector<std::string>{"msg_1", "msg_2", "msg_3"}));

  ListQuery q;
  q.limit = 2;  // newest first by default
  auto page = store_->ListConversationItems("key-a", "conv_1", q);
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(ItemIds(page->rows), (std::vector<std::string>{"msg_3", "msg_2"}));
  EXPECT_TRUE(page->has_more);

  // Another key sees none of it, and adds nothing to it.
  EXPECT_TRUE(absl::IsNotFound(store_->GetConversation("key-b", "conv_1").status()));
  EXPECT_TRUE(absl::IsNotFound(store_->ConversationHistory("key-b", "conv_1").status()));
  std::vector<ConversationItemRow> foreign = {ConversationItem("msg_4", "conv_1")};
  EXPECT_TRUE(absl::IsNotFound(store_->AddConversationItems("key-b", "conv_1", &foreign)));
  EXPECT_TRUE(absl::IsNotFound(store_->GetConversationItem("key-b", "conv_1", "msg_1").status()));
}

TEST_F(ConversationStoreTest, DeletingAnItemOrTheConversation) {
  ASSERT_TRUE(store_->DeleteConversationItem("key-a", "conv_1", "msg_1").ok());
  EXPECT_TRUE(absl::IsNotFound(store_->DeleteConversationItem("key-a", "conv_1", "msg_1")));
  auto metadata = store_->UpdateConversationMetadata("key-a", "conv_1", "{\"topic\":\"x\"}");
  ASSERT_TRUE(metadata.ok()) << metadata.status();
  EXPECT_EQ(metadata->metadata, "{\"topic\":\"x\"}");

  ASSERT_TRUE(store_->DeleteConversation("key-a", "conv_1").ok());
  absl::Status gone = store_->GetConversation("key-a", "conv_1").status();
  EXPECT_TRUE(absl::IsNotFound(gone));
  EXPECT_EQ(gone.message(), "No conversation found with id 'conv_1'.");
  // Its items went with it (ON DELETE CASCADE): a new conversation with the same id starts empty.
  ConversationRow again;
  again.id = "conv_1";
  again.owner = "key-a";
  std::vector<ConversationItemRow> none;
  ASSERT_TRUE(store_->CreateConversation(&again, &none).ok());
  auto history = store_->ConversationHistory("key-a", "conv_1");
  ASSERT_TRUE(history.ok());
  EXPECT_TRUE(history->empty());
}

TEST_F(ConversationStoreTest, AResponsesEndAddsItsTurnToItsConversation) {
  ResponseRow r;
  r.id = "resp_1";
  r.owner = "key-a";
  r.conversation_id = "conv_1";
  std::vector<ResponseItemRow> input;
  ASSERT_TRUE(store_->CreateResponse(&r, &input).ok());
  ResponseEnd end;
  end.owner = "key-a";
  end.response_id = "resp_1";
  end.status = "completed";
  end.at = 1001;
  end.conversation_id = "conv_1";
  end.conversation_items = {ConversationItem("msg_in", "conv_1"), ConversationItem("msg_out", "conv_1")};
  ASSERT_TRUE(store_->FinishResponse(end).ok());
  auto history = store_->ConversationHistory("key-a", "conv_1");
  ASSERT_TRUE(history.ok());
  EXPECT_EQ(ItemIds(*history), (std::vector<std::string>{"msg_1", "msg_2", "msg_in", "msg_out"}));
  auto stored = store_->GetResponse("key-a", "resp_1");
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->conversation_id.value_or(""), "conv_1");

  // A conversation deleted while a response in it ran: the response still ends, alone.
  ResponseRow r2 = r;
  r2.id = "resp_2";
  ASSERT_TRUE(store_->CreateResponse(&r2, &input).ok());
  ASSERT_TRUE(store_->DeleteConversation("key-a", "conv_1").ok());
  end.response_id = "resp_2";
  end.conversation_items = {ConversationItem("msg_in2", "conv_1")};
  ASSERT_TRUE(store_->FinishResponse(end).ok());
  auto ended = store_->GetResponse("key-a", "resp_2");
  ASSERT_TRUE(ended.ok());
  EXPECT_EQ(ended->status, "completed");
}

}  // namespace
}  // namespace shardlm
