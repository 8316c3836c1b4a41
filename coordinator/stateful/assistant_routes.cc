// /v1/assistants: create, list, retrieve, modify, delete (client.beta.assistants).
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/random_token.h"
#include "common/status.h"
#include "coordinator/stateful/objects.h"
#include "coordinator/stateful/stateful_params.h"
#include "coordinator/stateful/stateful_routes.h"

namespace shardlm {
namespace stateful {
namespace {

const std::set<std::string> kAssistantKeys = {
    "model",    "name",        "description", "instructions",    "tools",           "tool_resources",
    "metadata", "temperature", "top_p",       "response_format", "reasoning_effort"};

absl::Status CheckModel(const StatefulContext& ctx, const std::string& model) {
  for (const std::string& name : ctx.model_names) {
    if (name == model) return absl::OkStatus();
  }
  return BadParam("model",
                  absl::StrCat("The model '", model.substr(0, 128), "' does not exist; this server serves '",
                               absl::StrJoin(ctx.model_names, "', '"), "'"));
}

// The fields of a create (every one) or a modify (those given) onto *a.
absl::Status FieldsInto(const StatefulContext& ctx, const Json& body, bool create, AssistantRow* a) {
  SHARDLM_RETURN_IF_ERROR(OnlyKnown(body, kAssistantKeys));
  SHARDLM_RETURN_IF_ERROR(RefusedUnlessEmpty(body, "tool_resources", "no file_search or code_interpreter"));
  SHARDLM_RETURN_IF_ERROR(RefusedUnlessEmpty(body, "reasoning_effort", "the model does not reason"));
  if (create || body.contains("model")) {
    if (!body.contains("model") || !body["model"].is_string())
      return BadParam("model", "model is required (a string)");
    a->model = body["model"].get<std::string>();
    SHARDLM_RETURN_IF_ERROR(CheckModel(ctx, a->model));
  }
  auto given = [&](const char* key) { return create || body.contains(key); };
  if (given("name")) {
    SHARDLM_ASSIGN_OR_RETURN(a->name, OptionalText(body, "name", kMaxNameChars));
  }
  if (given("description")) {
    SHARDLM_ASSIGN_OR_RETURN(a->description, OptionalText(body, "description", kMaxDescriptionChars));
  }
  if (given("instructions")) {
    SHARDLM_ASSIGN_OR_RETURN(a->instructions, OptionalText(body, "instructions", kMaxInstructionsChars));
  }
  if (given("tools")) {
    SHARDLM_ASSIGN_OR_RETURN(a->tools, ToolsOf(body));
  }
  if (given("metadata")) {
    SHARDLM_ASSIGN_OR_RETURN(a->metadata, MetadataOf(body));
  }
  if (given("temperature")) {
    SHARDLM_ASSIGN_OR_RETURN(a->temperature, OptionalNumber(body, "temperature", 0, 2));
  }
  if (given("top_p")) {
    SHARDLM_ASSIGN_OR_RETURN(a->top_p, OptionalNumber(body, "top_p", 0, 1));
  }
  if (given("response_format")) {
    SHARDLM_ASSIGN_OR_RETURN(a->response_format, ResponseFormatOf(body));
  }
  return absl::OkStatus();
}

absl::StatusOr<Json> Create(const StatefulContext& ctx, const StatefulCall& call) {
  AssistantRow a;
  SHARDLM_RETURN_IF_ERROR(FieldsInto(ctx, call.body, /*create=*/true, &a));
  a.id = RandomId("asst_");
  a.owner = call.owner;
  a.created_at = call.now_s;
  SHARDLM_RETURN_IF_ERROR(ctx.store->CreateAssistant(&a));
  return AssistantObject(a);
}

absl::StatusOr<Json> Modify(const StatefulContext& ctx, const StatefulCall& call, const std::string& id) {
  SHARDLM_ASSIGN_OR_RETURN(AssistantRow a, ctx.store->GetAssistant(call.owner, id));
  SHARDLM_RETURN_IF_ERROR(FieldsInto(ctx, call.body, /*create=*/false, &a));
  SHARDLM_RETURN_IF_ERROR(ctx.store->UpdateAssistant(a));
  return AssistantObject(a);
}

}  // namespace

absl::StatusOr<Json> AssistantsRoute(const StatefulContext& ctx, const StatefulCall& call) {
  const auto& path = call.path;
  if (path.size() == 1 && call.method == "POST") return Create(ctx, call);
  if (path.size() == 1 && call.method == "GET") {
    SHARDLM_ASSIGN_OR_RETURN(ListQuery q, ListQueryOf(call.query));
    SHARDLM_ASSIGN_OR_RETURN(ListPage<AssistantRow> page, ctx.store->ListAssistants(call.owner, q));
    return ListObject(page, AssistantObject);
  }
  if (path.size() != 2) return InvalidUrl(call);
  const std::string& id = path[1];
  if (call.method == "GET") {
    SHARDLM_ASSIGN_OR_RETURN(AssistantRow a, ctx.store->GetAssistant(call.owner, id));
    return AssistantObject(a);
  }
  if (call.method == "POST") return Modify(ctx, call, id);
  if (call.method == "DELETE") {
    SHARDLM_RETURN_IF_ERROR(ctx.store->DeleteAssistant(call.owner, id));
    return DeletedObject(id, "assistant");
  }
  return InvalidUrl(call);
}

}  // namespace stateful
}  // namespace shardlm
