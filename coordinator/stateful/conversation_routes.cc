// /v1/conversations: conversations (create with items, retrieve, update, delete)
// and their items (create, list, retrieve, delete): client.conversations. A
// response made with `conversation` reads its items first and, once it answers,
// adds its input and its reply to them (response_execution.cc).
#include "absl/strings/str_cat.h"
#include "common/random_token.h"
#include "common/status.h"
#include "coordinator/stateful/objects.h"
#include "coordinator/stateful/response_items.h"
#include "coordinator/stateful/stateful_params.h"
#include "coordinator/stateful/stateful_routes.h"

namespace shardlm {
namespace stateful {
namespace {

Json ConversationObject(const ConversationRow& c) {
  return Json{{"id", c.id},
              {"object", "conversation"},
              {"created_at", c.created_at},
              {"metadata", Json::parse(c.metadata)}};
}

Json ItemObject(const ConversationItemRow& item) { return Json::parse(item.item); }

// A create body's `items` (at most 20: messages, function calls and their outputs) as rows of conversation
// `id`; absent is none.
absl::StatusOr<std::vector<ConversationItemRow>> ItemsFrom(const StatefulCall& call, const std::string& id,
                                                           bool required) {
  std::vector<ConversationItemRow> rows;
  const Json& body = call.body;
  if (!body.contains("items") || body["items"].is_null()) {
    if (required) return BadParam("items", "items is required (a list of at most 20 items)");
    return rows;
  }
  const Json& items = body["items"];
  if (!items.is_array() || (required && items.empty()))
    return BadParam("items", "items must be a non-empty list");
  if (items.size() > kMaxConversationItems) {
    return BadParam("items",
                    absl::StrCat("items has ", items.size(), " entries; at most ", kMaxConversationItems));
  }
  for (size_t i = 0; i < items.size(); ++i) {
    SHARDLM_ASSIGN_OR_RETURN(Json item, InputItem(items[i], absl::StrCat("items[", i, "]")));
    ConversationItemRow row;
    row.id = item["id"];
    row.owner = call.owner;
    row.created_at = call.now_s;
    row.conversation_id = id;
    row.item = item.dump();
    rows.push_back(std::move(row));
  }
  return rows;
}

absl::StatusOr<Json> CreateConversation(const StatefulContext& ctx, const StatefulCall& call) {
  SHARDLM_RETURN_IF_ERROR(OnlyKnown(call.body, {"items", "metadata"}));
  ConversationRow c;
  c.id = RandomId("conv_");
  c.owner = call.owner;
  c.created_at = call.now_s;
  SHARDLM_ASSIGN_OR_RETURN(c.metadata, MetadataOf(call.body));
  SHARDLM_ASSIGN_OR_RETURN(std::vector<ConversationItemRow> items, ItemsFrom(call, c.id, false));
  SHARDLM_RETURN_IF_ERROR(ctx.store->CreateConversation(&c, &items));
  return ConversationObject(c);
}

absl::StatusOr<Json> UpdateConversation(const StatefulContext& ctx, const StatefulCall& call,
                                        const std::string& id) {
  SHARDLM_RETURN_IF_ERROR(OnlyKnown(call.body, {"metadata"}));
  if (!call.body.contains("metadata")) return BadParam("metadata", "metadata is required");
  SHARDLM_ASSIGN_OR_RETURN(std::string metadata, MetadataOf(call.body));
  SHARDLM_ASSIGN_OR_RETURN(ConversationRow c,
                           ctx.store->UpdateConversationMetadata(call.owner, id, metadata));
  return ConversationObject(c);
}

// /v1/conversations/{conversation_id}/items[/{item_id}]
absl::StatusOr<Json> ItemsRoute(const StatefulContext& ctx, const StatefulCall& call) {
  const std::string& conversation_id = call.path[1];
  if (call.path.size() == 3 && call.method == "POST") {
    SHARDLM_RETURN_IF_ERROR(OnlyKnown(call.body, {"items"}));
    SHARDLM_RETURN_IF_ERROR(ListQueryOf(call.query, {"include[]", "include"}).status());
    SHARDLM_ASSIGN_OR_RETURN(std::vector<ConversationItemRow> items, ItemsFrom(call, conversation_id, true));
    SHARDLM_RETURN_IF_ERROR(ctx.store->AddConversationItems(call.owner, conversation_id, &items));
    ListPage<ConversationItemRow> added;
    added.rows = std::move(items);
    return ListObject(added, ItemObject);
  }
  if (call.path.size() == 3 && call.method == "GET") {
    SHARDLM_ASSIGN_OR_RETURN(ListQuery q, ListQueryOf(call.query, {"include[]", "include"}));
    SHARDLM_ASSIGN_OR_RETURN(ListPage<ConversationItemRow> page,
                             ctx.store->ListConversationItems(call.owner, conversation_id, q));
    return ListObject(page, ItemObject);
  }
  if (call.path.size() != 4) return InvalidUrl(call);
  const std::string& id = call.path[3];
  if (call.method == "GET") {
    SHARDLM_ASSIGN_OR_RETURN(ConversationItemRow item,
                             ctx.store->GetConversationItem(call.owner, conversation_id, id));
    return ItemObject(item);
  }
  if (call.method == "DELETE") {
    // OpenAI answers the conversation the item was deleted from.
    SHARDLM_RETURN_IF_ERROR(ctx.store->DeleteConversationItem(call.owner, conversation_id, id));
    SHARDLM_ASSIGN_OR_RETURN(ConversationRow c, ctx.store->GetConversation(call.owner, conversation_id));
    return ConversationObject(c);
  }
  return InvalidUrl(call);
}

}  // namespace

absl::StatusOr<Json> ConversationsRoute(const StatefulContext& ctx, const StatefulCall& call) {
  const auto& path = call.path;
  if (path.size() == 1 && call.method == "POST") return CreateConversation(ctx, call);
  if (path.size() >= 3 && path[2] == "items") return ItemsRoute(ctx, call);
  if (path.size() != 2) return InvalidUrl(call);
  const std::string& id = path[1];
  if (call.method == "GET") {
    SHARDLM_ASSIGN_OR_RETURN(ConversationRow c, ctx.store->GetConversation(call.owner, id));
    return ConversationObject(c);
  }
  if (call.method == "POST") return UpdateConversation(ctx, call, id);
  if (call.method == "DELETE") {
    SHARDLM_RETURN_IF_ERROR(ctx.store->DeleteConversation(call.owner, id));
    ctx.turns->Drop(id);
    return DeletedObject(id, "conversation");
  }
  return InvalidUrl(call);
}

}  // namespace stateful
}  // namespace shardlm
