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

Json RunObject(const RunRow& r) {
  const Json config = Parsed(r.config);
  auto from_config = [&](const char* key, Json fallback) {
    return config.contains(key) ? config[key] : fallback;
  };
  Json o = Json::object();
  o["id"] = r.id;
  o["object"] = "thread.run";
  o["created_at"] = r.created_at;
  o["assistant_id"] = r.assistant_id;
  o["thread_id"] = r.thread_id;
  o["status"] = r.status;
  o["started_at"] = OrNull(r.started_at);
  o["expires_at"] = OrNull(r.expires_at);
  o["cancelled_at"] = OrNull(r.cancelled_at);
  o["failed_at"] = OrNull(r.failed_at);
  o["completed_at"] = OrNull(r.completed_at);
  o["required_action"] = r.required_action ? Parsed(*r.required_action) : Json();
  o["last_error"] = r.last_error ? Parsed(*r.last_error) : Json();
  o["model"] = from_config("model", "");
  o["instructions"] = from_config("instructions", "");
  o["tools"] = from_config("tools", Json::array());
  o["metadata"] = Parsed(r.metadata);
  o["incomplete_details"] = r.incomplete_reason ? Json{{"reason", *r.incomplete_reason}} : Json();
  o["usage"] = r.usage ? Parsed(*r.usage) : Json();
  o["temperature"] = from_config("temperature", Json());
  o["top_p"] = from_config("top_p", Json());
  o["max_prompt_tokens"] = from_config("max_prompt_tokens", Json());
  o["max_completion_tokens"] = from_config("max_completion_tokens", Json());
  o["truncation_strategy"] =
      from_config("truncation_strategy", Json{{"type", "auto"}, {"last_messages", nullptr}});
  o["response_format"] = from_config("response_format", "auto");
  o["tool_choice"] = from_config("tool_choice", "auto");
  o["parallel_tool_calls"] = from_config("parallel_tool_calls", true);
  return o;
}

Json RunStepObject(const RunStepRow& s) {
  Json o = Json::object();
  o["id"] = s.id;
  o["object"] = "thread.run.step";
  o["created_at"] = s.created_at;
  o["run_id"] = s.run_id;
  o["assistant_id"] = s.assistant_id;
  o["thread_id"] = s.thread_id;
  o["type"] = s.type;
  o["status"] = s.status;
  o["cancelled_at"] = OrNull(s.cancelled_at);
  o["completed_at"] = OrNull(s.completed_at);
  o["expired_at"] = OrNull(s.expired_at);
  o["failed_at"] = OrNull(s.failed_at);
  o["last_error"] = s.last_error ? Parsed(*s.last_error) : Json();
  o["step_details"] = Parsed(s.step_details);
  o["usage"] = s.usage ? Parsed(*s.usage) : Json();
  o["metadata"] = Json::object();
  return o;
}

Json DeletedObject(const std::string& id, const std::string& kind) {
  return Json{{"id", id}, {"object", kind + ".deleted"}, {"deleted", true}};
}

}  // namespace stateful
}  // namespace shardlm
