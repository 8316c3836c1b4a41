// The stored rows as the objects OpenAI's clients read (docs/stateful_apis.md
// section 2): every field of the client's type, null where there is nothing to say.
#pragma once

#include <string>
#include <vector>

#include "coordinator/openai_wire/api_error.h"
#include "state/rows.h"

namespace shardlm {
namespace stateful {

using openai::Json;

Json AssistantObject(const AssistantRow& a);
Json ThreadObject(const ThreadRow& t);
Json MessageObject(const MessageRow& m);
// A run: its config's fields (model, instructions, tools, sampling, budgets) at the top level.
Json RunObject(const RunRow& r);
Json RunStepObject(const RunStepRow& s);
// {id, object: "<kind>.deleted", deleted: true}
Json DeletedObject(const std::string& id, const std::string& kind);

// {object: "list", data, first_id, last_id, has_more}; the ids are null on an empty page.
template <typename Row, typename ToObject>
Json ListObject(const ListPage<Row>& page, ToObject to_object) {
  Json data = Json::array();
  for (const Row& r : page.rows) data.push_back(to_object(r));
  Json out = Json::object();
  out["object"] = "list";
  out["data"] = std::move(data);
  out["first_id"] = page.rows.empty() ? Json() : Json(page.rows.front().id);
  out["last_id"] = page.rows.empty() ? Json() : Json(page.rows.back().id);
  out["has_more"] = page.has_more;
  return out;
}

}  // namespace stateful
}  // namespace shardlm
