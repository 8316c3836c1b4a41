#include "coordinator/stateful/response_items.h"

#include "absl/strings/str_cat.h"
#include "common/random_token.h"
#include "common/status.h"
#include "coordinator/stateful/stateful_params.h"
#include "coordinator/stateful/thread_prompt.h"

namespace shardlm {
namespace stateful {
namespace {

constexpr size_t kMaxToolText = 1 << 20;  // a call's arguments or output, in bytes

absl::StatusOr<std::string> ItemText(const Json& item, const std::string& param, const char* key) {
  if (!item.contains(key) || !item[key].is_string()) {
    return BadParam(absl::StrCat(param, ".", key), absl::StrCat(param, ".", key, " is required (a string)"));
  }
  const std::string text = item[key];
  if (text.size() > kMaxToolText) {
    return BadParam(absl::StrCat(param, ".", key),
                    absl::StrCat(param, ".", key, " is longer than ", kMaxToolText, " bytes"));
  }
  return text;
}

absl::StatusOr<Json> FunctionCallInput(const Json& item, const std::string& param) {
  SHARDLM_ASSIGN_OR_RETURN(std::string call_id, ItemText(item, param, "call_id"));
  SHARDLM_ASSIGN_OR_RETURN(std::string name, ItemText(item, param, "name"));
  SHARDLM_ASSIGN_OR_RETURN(std::string arguments, ItemText(item, param, "arguments"));
  return Json{{"id", RandomId("fc_")}, {"type", "function_call"},
              {"status", "completed"}, {"call_id", call_id},
              {"name", name},          {"arguments", arguments}};
}

absl::StatusOr<Json> FunctionOutputInput(const Json& item, const std::string& param) {
  SHARDLM_ASSIGN_OR_RETURN(std::string call_id, ItemText(item, param, "call_id"));
  SHARDLM_ASSIGN_OR_RETURN(std::string output, ItemText(item, param, "output"));
  return Json{{"id", RandomId("fco_")},
              {"type", "function_call_output"},
              {"status", "completed"},
              {"call_id", call_id},
              {"output", output}};
}

absl::StatusOr<Json> MessageItem(const Json& item, const std::string& param) {
  if (!item.is_object()) return BadParam(param, absl::StrCat(param, " must be an object"));
  if (item.contains("type") && !item["type"].is_string())
    return BadParam(param + ".type", param + ".type must be a string");
  const std::string role =
      item.contains("role") && item["role"].is_string() ? item["role"].get<std::string>() : "";
  if (role != "user" && role != "assistant" && role != "system" && role != "developer") {
    return BadParam(param + ".role",
                    absl::StrCat(param, ".role must be user, assistant, system or developer"));
  }
  const char* part_type = role == "assistant" ? "output_text" : "input_text";
  Json parts = Json::array();
  const Json& content = item.contains("content") ? item["content"] : Json();
  if (content.is_string()) {
    parts.push_back(Json{{"type", part_type}, {"text", content}});
  } else if (content.is_array() && !content.empty()) {
    for (size_t i = 0; i < content.size(); ++i) {
      const Json& p = content[i];
      const std::string pt =
          p.is_object() && p.contains("type") && p["type"].is_string() ? p["type"].get<std::string>() : "";
      if ((pt != "input_text" && pt != "output_text" && pt != "text") || !p.contains("text") ||
          !p["text"].is_string()) {
        return BadParam(param + ".content", absl::StrCat(param, ".content[", i,
                                                         "] must be {\"type\": \"input_text\", "
                                                         "\"text\": \"...\"} (text only on this server)"));
      }
      parts.push_back(Json{{"type", part_type}, {"text", p["text"]}});
    }
  } else {
    return BadParam(param + ".content",
                    absl::StrCat(param, ".content must be a string or a list of text parts"));
  }
  if (role == "assistant") {
    for (Json& p : parts) p["annotations"] = Json::array();
  }
  return Json{{"id", RandomId("msg_")},
              {"type", "message"},
              {"role", role},
              {"status", "completed"},
              {"content", std::move(parts)}};
}

}  // namespace

absl::StatusOr<Json> InputItem(const Json& item, const std::string& param) {
  if (!item.is_object()) return BadParam(param, absl::StrCat(param, " must be an object"));
  if (item.contains("type") && !item["type"].is_string())
    return BadParam(param + ".type", param + ".type must be a string");
  const std::string type = item.contains("type") ? item["type"].get<std::string>() : "message";
  if (type == "message") return MessageItem(item, param);
  if (type == "function_call") return FunctionCallInput(item, param);
  if (type == "function_call_output") return FunctionOutputInput(item, param);
  return BadParam(param + ".type",
                  absl::StrCat(param, ".type '", type.substr(0, 64),
                               "' is not supported by this server: message, function_call and "
                               "function_call_output only"));
}

std::vector<Json> TurnsOf(const std::vector<Json>& items) {
  std::vector<Json> turns;
  bool calls_may_join = false;  // the newest turn is an assistant's the next calls belong to
  for (const Json& item : items) {
    const std::string type = item.value("type", "message");
    if (type == "function_call") {
      Json call = {
          {"id", item.value("call_id", "")},
          {"type", "function"},
          {"function",
           {{"name", item.value("name", "")}, {"arguments", ArgumentsValue(item.value("arguments", ""))}}}};
      if (!calls_may_join)
        turns.push_back(Json{{"role", "assistant"}, {"content", ""}, {"tool_calls", Json::array()}});
      if (!turns.back().contains("tool_calls")) turns.back()["tool_calls"] = Json::array();
      turns.back()["tool_calls"].push_back(std::move(call));
      calls_may_join = true;
      continue;
    }
    if (type == "function_call_output") {
      turns.push_back(Json{{"role", "tool"},
                           {"tool_call_id", item.value("call_id", "")},
                           {"content", item.value("output", "")}});
      calls_may_join = false;
      continue;
    }
    std::string text;
    for (const Json& part : item.value("content", Json::array()))
      absl::StrAppend(&text, part.value("text", ""));
    std::string role = item.value("role", "user");
    if (role == "developer") role = "system";
    turns.push_back(Json{{"role", role}, {"content", text}});
    calls_may_join = role == "assistant";
  }
  return turns;
}

absl::StatusOr<Json> ResponseToolsOf(const Json& body, Json* echoed) {
  Json chat = Json::array();
  *echoed = Json::array();
  SHARDLM_ASSIGN_OR_RETURN(const Json* list, ToolList(body));
  if (list == nullptr) return chat;
  const Json& tools = *list;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = absl::StrCat("tools[", i, "]");
    const Json& t = tools[i];
    const std::string type =
        t.is_object() && t.contains("type") && t["type"].is_string() ? t["type"].get<std::string>() : "";
    if (type != "function") {
      return BadParam(at + ".type", absl::StrCat(at, ".type '", type.substr(0, 64),
                                                 "' is not supported by this server: only function tools"));
    }
    SHARDLM_RETURN_IF_ERROR(CheckFunction(t, at));
    Json fn = {{"name", t["name"]}};
    if (t.contains("description") && t["description"].is_string()) fn["description"] = t["description"];
    fn["parameters"] = t.contains("parameters") && t["parameters"].is_object()
                           ? t["parameters"]
                           : Json{{"type", "object"}, {"properties", Json::object()}};
    chat.push_back(Json{{"type", "function"}, {"function", fn}});
    echoed->push_back(
        Json{{"type", "function"},
             {"name", t["name"]},
             {"description", fn.value("description", Json())},
             {"parameters", fn["parameters"]},
             {"strict", t.contains("strict") && t["strict"].is_boolean() ? t["strict"] : Json(true)}});
  }
  return chat;
}

Json FunctionCallItem(const std::string& name, const std::string& arguments) {
  return Json{{"id", RandomId("fc_")}, {"type", "function_call"},
              {"status", "completed"}, {"call_id", RandomId("call_")},
              {"name", name},          {"arguments", arguments}};
}

}  // namespace stateful
}  // namespace shardlm
