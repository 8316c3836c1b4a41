// /api/chat's messages and tools (docs/ollama.md "Requests"): Ollama's message
// shape checked and turned into the messages chat templates expect (OpenAI's:
// tool calls with an id and type, tool results with their name and call id),
// rendered with the tools and tokenized.
#include <set>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "chat/chat_template.h"
#include "coordinator/ollama/ollama_parse.h"

namespace shardlm {
namespace ollama {
namespace {

using openai::Params;

const std::set<std::string> kMessageKeys = {"role",       "content",   "thinking",    "images",
                                            "tool_calls", "tool_name", "tool_call_id"};

// Ollama's tool calls ({id?, function: {index?, name, arguments: {...}}}) as templates expect them.
bool ToolCallsOf(Params& p, const std::string& at, const Json& calls, Json* out) {
  if (!calls.is_array()) return p.Fail(at, at + " must be a list");
  *out = Json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    const std::string ck = absl::StrCat(at, "[", k, "]");
    const Json& c = calls[k];
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
        !c["function"].contains("name") || !c["function"]["name"].is_string()) {
      return p.Fail(ck, ck + " must be {\"function\": {\"name\": ..., \"arguments\": {...}}}");
    }
    Json args = c["function"].contains("arguments") ? c["function"]["arguments"] : Json::object();
    if (args.is_string()) {
      try {
        args = openai::ParseJson(args.get<std::string>());
      } catch (const std::exception&) {
      }
    }
    if (!args.is_object())
      return p.Fail(ck + ".function.arguments", ck + ".function.arguments must be an object");
    Json call = {{"id", c.contains("id") && c["id"].is_string() ? c["id"].get<std::string>()
                                                                : absl::StrCat("call_", k)},
                 {"type", "function"},
                 {"function", {{"name", c["function"]["name"]}, {"arguments", args}}}};
    out->push_back(std::move(call));
  }
  return true;
}

bool MessageOf(Params& p, size_t i, const Json& m, Json* out) {
  const std::string at = absl::StrCat("messages[", i, "]");
  if (!m.is_object()) return p.Fail(at, at + " must be an object");
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (!kMessageKeys.count(it.key()))
      return p.Fail(at + "." + it.key(), at + "." + it.key() + " is not a message field");
  }
  if (!m.contains("role") || !m["role"].is_string())
    return p.Fail(at + ".role", at + ".role is required (a string)");
  const std::string role = absl::AsciiStrToLower(m["role"].get<std::string>());
  if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
    return p.Fail(at + ".role",
                  absl::StrCat(at, ".role must be system, user, assistant or tool; got '", role, "'"));
  }
  if (m.contains("content") && !m["content"].is_null() && !m["content"].is_string())
    return p.Fail(at + ".content", at + ".content must be a string");
  if (m.contains("images") && !m["images"].is_null() && !(m["images"].is_array() && m["images"].empty()))
    return p.Fail(at + ".images", at + ".images: the model served takes text only");
  *out = Json{{"role", role},
              {"content", m.contains("content") && m["content"].is_string() ? m["content"] : Json("")}};
  if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
    Json calls;
    if (!ToolCallsOf(p, at + ".tool_calls", m["tool_calls"], &calls)) return false;
    if (!calls.empty()) (*out)["tool_calls"] = std::move(calls);
  }
  for (const auto& [from, to] :
       {std::pair<const char*, const char*>{"tool_name", "name"}, {"tool_call_id", "tool_call_id"}}) {
    if (!m.contains(from) || m[from].is_null()) continue;
    if (!m[from].is_string())
      return p.Fail(at + "." + from, absl::StrCat(at, ".", from, " must be a string"));
    (*out)[to] = m[from];
  }
  return true;
}

bool ToolsOf(Params& p, const openai::ModelContext& model, OllamaRequest& r, Json* tools) {
  if (!p.Has("tools")) return true;
  const Json& t = p.At("tools");
  if (!t.is_array()) return p.Fail("tools", "tools must be a list");
  for (size_t k = 0; k < t.size(); ++k) {
    const Json& tool = t[k];
    if (!tool.is_object() || !tool.contains("type") || tool["type"] != "function" ||
        !tool.contains("function") || !tool["function"].is_object() || !tool["function"].contains("name") ||
        !tool["function"]["name"].is_string()) {
      return p.Fail(
          absl::StrCat("tools[", k, "]"),
          absl::StrCat("tools[", k, "] must be {\"type\": \"function\", \"function\": {\"name\": ...}}"));
    }
  }
  if (t.empty()) return true;  // the Python client always sends "tools": []
  *tools = t;
  r.parse_tool_calls = true;
  r.tool_format = ToolFormatOf(model.chat_template->sources());
  r.tool_names = ToolNames(t);
  return true;
}

}  // namespace

bool ThinkOf(Params& p, const std::string& model, Json* extra) {
  if (!p.Has("think")) return true;
  const Json& v = p.At("think");
  if (v.is_boolean() && !v.get<bool>()) {
    (*extra)["enable_thinking"] = false;
    return true;
  }
  if (v.is_boolean() || (v.is_string() && (v == "low" || v == "medium" || v == "high" || v == "max")))
    return p.Fail("think", absl::StrCat("think: \"", model, "\" does not support thinking"));
  return p.Fail("think", "think must be true, false, \"low\", \"medium\", \"high\" or \"max\"");
}

bool ChatPromptInto(Params& p, const openai::ModelContext& model, OllamaRequest& r) {
  if (!p.Has("messages") || !p.At("messages").is_array())
    return p.Fail("messages", "messages must be a list");
  const Json& in = p.At("messages");
  Json messages = Json::array();
  for (size_t i = 0; i < in.size(); ++i) {
    Json m;
    if (!MessageOf(p, i, in[i], &m)) return false;
    messages.push_back(std::move(m));
  }
  if (model.chat_template == nullptr || model.tokenizer == nullptr)
    return p.Fail("messages",
                  absl::StrCat("\"", r.model, "\" does not support chat (the model has no chat template)"));
  Json tools, extra = Json::object();
  if (!ToolsOf(p, model, r, &tools) || !ThinkOf(p, r.model, &extra)) return false;
  if (messages.empty()) {
    r.load_only = true;
    return true;
  }
  auto text = model.chat_template->Apply(messages, /*add_generation_prompt=*/true, tools, extra);
  if (!text.ok())
    return p.Fail("messages",
                  absl::StrCat("the chat template rejected the messages: ", text.status().message()));
  auto ids = p.Encode("messages", *text, model, !model.chat_template->StartsWithBos(*text));
  if (!ids) return false;
  r.job.request.prompt = std::move(*ids);
  return true;
}

}  // namespace ollama
}  // namespace shardlm
