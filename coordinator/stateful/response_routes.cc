// /v1/responses/{id}: retrieve, delete, input items, cancel (client.responses). A create
// (POST /v1/responses) is response_execution.h's.
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "coordinator/stateful/background_responses.h"
#include "coordinator/stateful/objects.h"
#include "coordinator/stateful/response_objects.h"
#include "coordinator/stateful/stateful_params.h"
#include "coordinator/stateful/stateful_routes.h"

namespace shardlm {
namespace stateful {
namespace {

absl::StatusOr<Json> Retrieve(const StatefulContext& ctx, const StatefulCall& call, const std::string& id) {
  SHARDLM_RETURN_IF_ERROR(ListQueryOf(call.query, {"include[]", "stream", "starting_after"}).status());
  if (call.query.count("stream") && call.query.at("stream") == "true") {
    return BadParam("stream", "streaming a stored response again is not supported by this server");
  }
  SHARDLM_ASSIGN_OR_RETURN(ResponseRow row, ctx.store->GetResponse(call.owner, id));
  SHARDLM_ASSIGN_OR_RETURN(std::vector<ResponseItemRow> output,
                           ctx.store->ResponseItems(call.owner, id, "output"));
  Json items = Json::array();
  for (const ResponseItemRow& item : output) items.push_back(Json::parse(item.item));
  return ResponseObject(row, items);
}

// A background response in progress stops within one engine step where it generates here, and
// the answer waits (up to 5 s) for its end to be stored; one generating on a serve that is gone
// (or another) is marked cancelled in the store at once. A cancelled one answers as it is.
absl::StatusOr<Json> Cancel(const StatefulContext& ctx, const StatefulCall& call, const std::string& id) {
  SHARDLM_ASSIGN_OR_RETURN(ResponseRow row, ctx.store->GetResponse(call.owner, id));
  if (!Json::parse(row.config).value("background", false))
    return BadParam("response_id", "Only responses created with background=true can be cancelled.");
  if (row.status == "in_progress" && ctx.background->Cancel(id, std::chrono::seconds(5))) {
    SHARDLM_ASSIGN_OR_RETURN(row, ctx.store->GetResponse(call.owner, id));  // as its job ended it
  }
  if (row.status == "in_progress") {
    SHARDLM_RETURN_IF_ERROR(ctx.store->CancelResponse(call.owner, id, call.now_s).status());
    SHARDLM_ASSIGN_OR_RETURN(row, ctx.store->GetResponse(call.owner, id));
  }
  if (row.status != "cancelled") {
    return BadParam("response_id", absl::StrCat("Cannot cancel a response with status '", row.status, "'."));
  }
  return Retrieve(ctx, call, id);
}

}  // namespace

absl::StatusOr<Json> ResponsesRoute(const StatefulContext& ctx, const StatefulCall& call) {
  const auto& path = call.path;
  if (path.size() < 2) return InvalidUrl(call);
  const std::string& id = path[1];
  if (path.size() == 2 && call.method == "GET") return Retrieve(ctx, call, id);
  if (path.size() == 2 && call.method == "DELETE") {
    SHARDLM_RETURN_IF_ERROR(ctx.store->DeleteResponse(call.owner, id));
    ctx.turns->Drop(id);
    return Json{{"id", id}, {"object", "response"}, {"deleted", true}};
  }
  if (path.size() == 3 && path[2] == "input_items" && call.method == "GET") {
    SHARDLM_ASSIGN_OR_RETURN(ListQuery q, ListQueryOf(call.query, {"include[]"}));
    SHARDLM_ASSIGN_OR_RETURN(ListPage<ResponseItemRow> page,
                             ctx.store->ListResponseItems(call.owner, id, "input", q));
    return ListObject(page, [](const ResponseItemRow& item) { return Json::parse(item.item); });
  }
  if (path.size() == 3 && path[2] == "cancel" && call.method == "POST") return Cancel(ctx, call, id);
  return InvalidUrl(call);
}

}  // namespace stateful
}  // namespace shardlm
