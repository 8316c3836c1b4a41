#include "coordinator/stateful/response_objects.h"

namespace shardlm {
namespace stateful {

Json ResponseObject(const ResponseRow& row, const Json& output) {
  const Json config = Json::parse(row.config);
  auto from_config = [&](const char* key, Json fallback) {
    return config.contains(key) ? config[key] : fallback;
  };
  Json o = Json::object();
  o["id"] = row.id;
  o["object"] = "response";
  o["created_at"] = row.created_at;
  o["status"] = row.status;
  o["background"] = from_config("background", false);
  o["completed_at"] = row.completed_at ? Json(*row.completed_at) : Json();
  o["conversation"] = row.conversation_id ? Json{{"id", *row.conversation_id}} : Json();
  o["error"] = row.error ? Json::parse(*row.error) : Json();
  o["incomplete_details"] = row.incomplete_reason ? Json{{"reason", *row.incomplete_reason}} : Json();
  o["instructions"] = from_config("instructions", Json());
  o["max_output_tokens"] = from_config("max_output_tokens", Json());
  o["max_tool_calls"] = Json();
  o["metadata"] = from_config("metadata", Json::object());
  o["model"] = from_config("model", "");
  o["output"] = output;
  o["parallel_tool_calls"] = from_config("parallel_tool_calls", true);
  o["previous_response_id"] = row.previous_response_id ? Json(*row.previous_response_id) : Json();
  o["reasoning"] = Json{{"effort", nullptr}, {"summary", nullptr}};
  o["service_tier"] = "default";
  o["store"] = from_config("store", true);
  o["temperature"] = from_config("temperature", 1.0);
  o["text"] = from_config("text", Json{{"format", {{"type", "text"}}}});
  o["tool_choice"] = from_config("tool_choice", "auto");
  o["tools"] = from_config("tools", Json::array());
  o["top_logprobs"] = 0;
  o["top_p"] = from_config("top_p", 1.0);
  o["truncation"] = from_config("truncation", "disabled");
  o["usage"] = row.usage ? Json::parse(*row.usage) : Json();
  o["user"] = from_config("user", Json());
  return o;
}

Json ResponseUsage(const GenerateUsage& u) {
  return Json{{"input_tokens", u.prompt_tokens},
              {"input_tokens_details", {{"cached_tokens", u.cached_tokens}, {"cache_write_tokens", 0}}},
              {"output_tokens", u.generated_tokens},
              {"output_tokens_details", {{"reasoning_tokens", 0}}},
              {"total_tokens", u.prompt_tokens + u.generated_tokens}};
}

Json OutputMessage(const std::string& id, const std::string& status, const std::string& text) {
  Json part = {
      {"type", "output_text"}, {"text", text}, {"annotations", Json::array()}, {"logprobs", Json::array()}};
  return Json{{"id", id},
              {"type", "message"},
              {"status", status},
              {"role", "assistant"},
              {"content", status == "in_progress" && text.empty() ? Json::array() : Json::array({part})}};
}

}  // namespace stateful
}  // namespace shardlm
