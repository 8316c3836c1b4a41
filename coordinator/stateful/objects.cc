#include "coordinator/stateful/objects.h"

#include <optional>

namespace shardlm {
namespace stateful {
namespace {

Json OrNull(const std::optional<std::string>& v) { return v ? Json(*v) : Json(); }
Json OrNull(const std::optional<double>& v) { return v ? Json(*v) : Json(); }
Json OrNull(const std::optional<int64_t>& v) { return v ? Json(*v) : Json(); }
// A JSON column as JSON (the store only holds what the front end wrote).
Json Parsed(const std::string& text) { return Json::parse(text); }

}  // namespace

Json AssistantObject(const AssistantRow& a) {
  Json o = Json::object();
  o["id"] = a.id;
  o["object"] = "assistant";
  o["created_at"] = a.created_at;
  o["name"] = OrNull(a.name);
  o["description"] = OrNull(a.description);
  o["model"] = a.model;
  o["instructions"] = OrNull(a.instructions);
  o["tools"] = Parsed(a.tools);
  o["tool_resources"] = Json::object();
  o["metadata"] = Parsed(a.metadata);
  o["temperature"] = OrNull(a.temperature);
  o["top_p"] = OrNull(a.top_p);
  o["response_format"] = a.response_format ? Parsed(*a.response_format) : Json("auto");
  return o;
}

Json ThreadObject(const ThreadRow& t) {
  Json o = Json::object();
  o["id"] = t.id;
  o["object"] = "thread";
  o["created_at"] = t.created_at;
  o["metadata"] = Parsed(t.metadata);
  o["tool_resources"] = Json::object();
  return o;
}

Json MessageObject(const MessageRow& m) {
  Json o = Json::object();
  o["id"] = m.id;
  o["object"] = "thread.message";
  o["created_at"] = m.created_at;
  o["thread_id"] = m.thread_id;
  o["status"] = m.status;
  o["incomplete_details"] = m.incomplete_reason ? Json{{"reason", *m.incomplete_reason}} : Json();
  o["completed_at"] = OrNull(m.completed_at);
  o["incomplete_at"] = OrNull(m.incomplete_at);
  o["role"] = m.role;
  o["content"] = Parsed(m.content);
  o["assistant_id"] = OrNull(m.assistant_id);
  o["run_id"] = OrNull(m.run_id);
  o["attachments"] = Json::array();
  o["metadata"] = Parsed(m.metadata);
  return o;
}

Json DeletedObject(const std::string& id, const std::string& kind) {
  return Json{{"id", id}, {"object", kind + ".deleted"}, {"deleted", true}};
}

}  // namespace stateful
}  // namespace shardlm
