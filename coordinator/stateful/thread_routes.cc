// /v1/threads: threads (create with messages, retrieve, modify, delete) and
// their messages (create, list, retrieve, modify, delete): client.beta.threads.
#include "absl/strings/str_cat.h"
#include "common/random_token.h"
#include "common/status.h"
#include "coordinator/stateful/objects.h"
#include "coordinator/stateful/run_executor.h"
#include "coordinator/stateful/stateful_params.h"
#include "coordinator/stateful/stateful_routes.h"

namespace shardlm {
namespace stateful {

absl::StatusOr<MessageRow> MessageFrom(const StatefulCall& call, const Json& body,
                                       const std::string& thread_id, const std::string& param) {
  auto field = [&](const std::string& key) { return param == "body" ? key : absl::StrCat(param, ".", key); };
  if (!body.is_object()) return BadParam(param, absl::StrCat(param, " must be an object"));
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (it.key() != "role" && it.key() != "content" && it.key() != "attachments" && it.key() != "metadata") {
      return BadParam(field(it.key()),
                      absl::StrCat("Unrecognized request argument supplied: ", field(it.key())));
    }
  }
  SHARDLM_RETURN_IF_ERROR(WithField(
      RefusedUnlessEmpty(body, "attachments", "no file_search or code_interpreter"), field("attachments")));
  MessageRow m;
  if (!body.contains("role") || !body["role"].is_string() ||
      (body["role"] != "user" && body["role"] != "assistant")) {
    return BadParam(field("role"), absl::StrCat(field("role"), " must be 'user' or 'assistant'"));
  }
  m.role = body["role"].get<std::string>();
  if (!body.contains("content"))
    return BadParam(field("content"), absl::StrCat(field("content"), " is required"));
  SHARDLM_ASSIGN_OR_RETURN(m.content, ContentOf(body["content"], field("content")));
  absl::StatusOr<std::string> metadata = MetadataOf(body);
  if (!metadata.ok()) return WithField(metadata.status(), field("metadata"));
  m.metadata = std::move(*metadata);
  m.id = RandomId("msg_");
  m.owner = call.owner;
  m.created_at = call.now_s;
  m.completed_at = call.now_s;
  m.thread_id = thread_id;
  return m;
}

absl::Status ThreadFrom(const StatefulCall& call, const Json& body, const std::string& param, ThreadRow* t,
                        std::vector<MessageRow>* messages) {
  auto field = [&](const std::string& key) { return param.empty() ? key : absl::StrCat(param, ".", key); };
  if (!body.is_object()) return BadParam(param, absl::StrCat(param, " must be an object"));
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (it.key() != "messages" && it.key() != "metadata" && it.key() != "tool_resources") {
      return BadParam(field(it.key()),
                      absl::StrCat("Unrecognized request argument supplied: ", field(it.key())));
    }
  }
  SHARDLM_RETURN_IF_ERROR(
      WithField(RefusedUnlessEmpty(body, "tool_resources", "no file_search or code_interpreter"),
                field("tool_resources")));
  t->id = RandomId("thread_");
  t->owner = call.owner;
  t->created_at = call.now_s;
  absl::StatusOr<std::string> metadata = MetadataOf(body);
  if (!metadata.ok()) return WithField(metadata.status(), field("metadata"));
  t->metadata = std::move(*metadata);
  if (!body.contains("messages") || body["messages"].is_null()) return absl::OkStatus();
  const Json& list = body["messages"];
  if (!list.is_array())
    return BadParam(field("messages"), absl::StrCat(field("messages"), " must be a list"));
  if (list.size() > kMaxThreadMessages) {
    return BadParam(field("messages"), absl::StrCat(field("messages"), " has ", list.size(),
                                                    " entries; at most ", kMaxThreadMessages));
  }
  for (size_t i = 0; i < list.size(); ++i) {
    SHARDLM_ASSIGN_OR_RETURN(MessageRow m,
                             MessageFrom(call, list[i], t->id, absl::StrCat(field("messages"), "[", i, "]")));
    messages->push_back(std::move(m));
  }
  return absl::OkStatus();
}

namespace {

absl::StatusOr<Json> CreateThread(const StatefulContext& ctx, const StatefulCall& call) {
  ThreadRow t;
  std::vector<MessageRow> messages;
  SHARDLM_RETURN_IF_ERROR(ThreadFrom(call, call.body, "", &t, &messages));
  SHARDLM_RETURN_IF_ERROR(ctx.store->CreateThread(&t, &messages));
  return ThreadObject(t);
}

absl::StatusOr<Json> ModifyThread(const StatefulContext& ctx, const StatefulCall& call,
                                  const std::string& id) {
  SHARDLM_RETURN_IF_ERROR(OnlyKnown(call.body, {"metadata", "tool_resources"}));
  SHARDLM_RETURN_IF_ERROR(
      RefusedUnlessEmpty(call.body, "tool_resources", "no file_search or code_interpreter"));
  if (!call.body.contains("metadata")) {
    SHARDLM_ASSIGN_OR_RETURN(ThreadRow t, ctx.store->GetThread(call.owner, id));
    return ThreadObject(t);
  }
  SHARDLM_ASSIGN_OR_RETURN(std::string metadata, MetadataOf(call.body));
  SHARDLM_ASSIGN_OR_RETURN(ThreadRow t, ctx.store->UpdateThreadMetadata(call.owner, id, metadata));
  return ThreadObject(t);
}

// /v1/threads/{thread_id}/messages[/{message_id}]
absl::StatusOr<Json> MessagesRoute(const StatefulContext& ctx, const StatefulCall& call) {
  const std::string& thread_id = call.path[1];
  if (call.path.size() == 3 && call.method == "POST") {
    SHARDLM_ASSIGN_OR_RETURN(MessageRow m, MessageFrom(call, call.body, thread_id, "body"));
    SHARDLM_RETURN_IF_ERROR(ctx.store->CreateMessage(&m));
    return MessageObject(m);
  }
  if (call.path.size() == 3 && call.method == "GET") {
    SHARDLM_ASSIGN_OR_RETURN(ListQuery q, ListQueryOf(call.query, {"run_id"}));
    std::optional<std::string> run_id;
    if (auto it = call.query.find("run_id"); it != call.query.end()) run_id = it->second;
    SHARDLM_ASSIGN_OR_RETURN(ListPage<MessageRow> page,
                             ctx.store->ListMessages(call.owner, thread_id, run_id, q));
    return ListObject(page, MessageObject);
  }
  if (call.path.size() != 4) return InvalidUrl(call);
  const std::string& id = call.path[3];
  if (call.method == "GET") {
    SHARDLM_ASSIGN_OR_RETURN(MessageRow m, ctx.store->GetMessage(call.owner, thread_id, id));
    return MessageObject(m);
  }
  if (call.method == "POST") {
    SHARDLM_RETURN_IF_ERROR(OnlyKnown(call.body, {"metadata"}));
    if (!call.body.contains("metadata")) {
      SHARDLM_ASSIGN_OR_RETURN(MessageRow m, ctx.store->GetMessage(call.owner, thread_id, id));
      return MessageObject(m);
    }
    SHARDLM_ASSIGN_OR_RETURN(std::string metadata, MetadataOf(call.body));
    SHARDLM_ASSIGN_OR_RETURN(MessageRow m,
                             ctx.store->UpdateMessageMetadata(call.owner, thread_id, id, metadata));
    return MessageObject(m);
  }
  if (call.method == "DELETE") {
    SHARDLM_RETURN_IF_ERROR(ctx.store->DeleteMessage(call.owner, thread_id, id));
    return DeletedObject(id, "thread.message");
  }
  return InvalidUrl(call);
}

}  // namespace

absl::StatusOr<Json> ThreadsRoute(const StatefulContext& ctx, const StatefulCall& call) {
  const auto& path = call.path;
  if (path.size() == 1 && call.method == "POST") return CreateThread(ctx, call);
  if (path.size() >= 3 && path[2] == "messages") return MessagesRoute(ctx, call);
  if ((path.size() >= 2 && path[1] == "runs") || (path.size() >= 3 && path[2] == "runs")) {
    return RunsRoute(ctx, call);
  }
  if (path.size() != 2) return InvalidUrl(call);
  const std::string& id = path[1];
  if (call.method == "GET") {
    SHARDLM_ASSIGN_OR_RETURN(ThreadRow t, ctx.store->GetThread(call.owner, id));
    return ThreadObject(t);
  }
  if (call.method == "POST") return ModifyThread(ctx, call, id);
  if (call.method == "DELETE") {
    // A run still generating for it is stopped: nobody can read what it would write.
    SHARDLM_ASSIGN_OR_RETURN(std::optional<std::string> active, ctx.store->ActiveRun(call.owner, id));
    SHARDLM_RETURN_IF_ERROR(ctx.store->DeleteThread(call.owner, id));
    ctx.turns->Drop(id);
    if (active) ctx.runs->Cancel(*active);
    return DeletedObject(id, "thread");
  }
  return InvalidUrl(call);
}

}  // namespace stateful
}  // namespace shardlm
