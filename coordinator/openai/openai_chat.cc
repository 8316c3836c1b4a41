// /v1/chat/completions' own parameters: messages (roles checked, content
// flattened to the text the templates expect), tools and tool_choice, the
// chat template's extras; the prompt rendered and tokenized.
#include <stdexcept>
#include <string>

#include "absl/strings/str_cat.h"
#include "chat/chat_template.h"
#include "coordinator/openai/openai_params.h"

namespace shardlm {
namespace openai {
namespace {

// Tools offered (and tool_choice not "none"): the reply is parsed into
// tool_calls in the chat template's own syntax; "required" or a named
// function ("*" or the name in `forced`) constrains decoding to one call.
bool ToolCallsInto(Params& p, const ModelContext& model, const std::string& forced, const Json& tools,
                   OpenAiRequest& r, GenerateJob& g) {
  const std::set<std::string> names = ToolNames(tools);
  const ToolFormat format = ToolFormatOf(model.chat_template->sources());
  if (!forced.empty()) {
    if (names.empty())
      return p.Fail("tool_choice", "tool_choice \"required\" or a named function needs tools");
    if (forced != "*" && !names.count(forced)) {
      return p.Fail("tool_choice",
                    absl::StrCat("tool_choice names the function '", forced, "', which is not among tools"));
    }
    if (!g.constraint.empty()) {
      return p.Fail("tool_choice",
                    absl::StrCat(r.constraint_param, " and tool_choice each constrain the output; give one"));
    }
    g.constraint = {
        ConstraintSpec::Kind::kGrammar, ForcedCallGrammar(format, tools, forced == "*" ? "" : forced), {}};
    r.constraint_param = "tool_choice";
  }
  if (names.empty()) return true;
  r.parse_tool_calls = true;
  r.tool_format = format;
  r.tool_names = names;
  return true;
}

// tool_choice into `forced`: "" for "none" and "auto" (the default), "*" for
// "required", or the one function named.
bool ToolChoiceOf(Params& p, std::string* forced) {
  if (!p.Has("tool_choice")) return true;
  const Json& t = p.At("tool_choice");
  if (t.is_string() && (t == "none" || t == "auto" || t == "required")) {
    if (t == "required") *forced = std::string(1, '*');
    return true;
  }
  if (t.is_object() && t.contains("type") && t["type"] == "function" && t.contains("function") &&
      t["function"].is_object() && t["function"].contains("name") && t["function"]["name"].is_string()) {
    *forced = t["function"]["name"].get<std::string>();
    return true;
  }
  return p.Fail("tool_choice",
                "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                "\"function\": {\"name\": ...}}");
}

// A message's content as the templates expect it: a string, or its text parts
// joined by newlines (as vLLM joins them); absent or null only for an
// assistant (one that made tool calls).
bool ContentOf(Params& p, const std::string& at, const Json& m, const std::string& role, std::string* text) {
  if (!m.contains("content") || m["content"].is_null()) {
    if (role != "assistant") return p.Fail(at + ".content", at + ".content is required");
    return true;
  }
  if (m["content"].is_string()) {
    *text = m["content"].get<std::string>();
    return true;
  }
  if (!m["content"].is_array()) {
    return p.Fail(at + ".content", at + ".content must be a string or a list of text parts");
  }
  for (size_t j = 0; j < m["content"].size(); ++j) {
    const Json& part = m["content"][j];
    const std::string pat = absl::StrCat(at, ".content[", j, "]");
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      return p.Fail(pat,
                    absl::StrCat(pat, " must be {\"type\": \"text\", \"text\": ...}; ",
                                 part.is_object() && part.contains("type") ? Shown(part["type"]) : "this",
                                 " content is not supported"));
    }
    if (j > 0) *text += "\n";
    *text += part["text"].get<std::string>();
  }
  return true;
}

// OpenAI sends a tool call's arguments as a JSON string; templates (and
// transformers' docs) expect the object, which they print with tojson. Text
// that is not JSON stays a string; JSON nested too deep is refused as the
// body itself would be.
bool ParseToolCallArguments(Params& p, const std::string& at, Json& message) {
  if (!message.contains("tool_calls") || !message["tool_calls"].is_array()) return true;
  for (size_t k = 0; k < message["tool_calls"].size(); ++k) {
    Json& call = message["tool_calls"][k];
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
    Json& fn = call["function"];
    if (!fn.contains("arguments") || !fn["arguments"].is_string()) continue;
    try {
      fn["arguments"] = ParseJson(fn["arguments"].get<std::string>());
    } catch (const Json::exception&) {
    } catch (const std::invalid_argument& e) {
      const std::string param = absl::StrCat(at, ".tool_calls[", k, "].function.arguments");
      return p.Fail(param, absl::StrCat(param, ": ", e.what()));
    }
  }
  return true;
}

// One message, messages[i]: its role checked ("developer" is "system"), its
// content flattened to text, its tool calls' arguments parsed.
bool MessageOf(Params& p, size_t i, const Json& m, Json* out) {
  const std::string at = absl::StrCat("messages[", i, "]");
  if (!m.is_object()) return p.Fail(at, at + " must be an object");
  if (!m.contains("role") || !m["role"].is_string())
    return p.Fail(at + ".role", at + ".role is required (a string)");
  std::string role = m["role"].get<std::string>();
  if (role == "developer") role = "system";
  if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
    return p.Fail(
        at + ".role",
        absl::StrCat(at, ".role must be one of system, developer, user, assistant, tool; got '", role, "'"));
  }
  std::string text;
  if (!ContentOf(p, at, m, role, &text)) return false;
  *out = m;
  (*out)["role"] = role;
  (*out)["content"] = text;
  return ParseToolCallArguments(p, at, *out);
}

bool MessagesOf(Params& p, Json* messages) {
  if (!p.Has("messages") || !p.At("messages").is_array() || p.At("messages").empty()) {
    return p.Fail("messages", "messages must be a non-empty list");
  }
  *messages = Json::array();
  const Json& in = p.At("messages");
  for (size_t i = 0; i < in.size(); ++i) {
    Json out;
    if (!MessageOf(p, i, in[i], &out)) return false;
    messages->push_back(std::move(out));
  }
  return true;
}

// The prompt: the messages and tools through the chat template, tokenized.
bool RenderPrompt(Params& p, const ModelContext& model, const Json& messages, const Json& tools,
                  EngineRequest& g) {
  bool add_generation_prompt = true;
  if (!p.Bool("add_generation_prompt", &add_generation_prompt)) return false;
  Json extra;
  if (p.Has("chat_template_kwargs")) {
    if (!p.At("chat_template_kwargs").is_object())
      return p.Fail("chat_template_kwargs", "chat_template_kwargs must be an object");
    extra = p.At("chat_template_kwargs");
  }
  auto text = model.chat_template->Apply(messages, add_generation_prompt, tools, extra);
  if (!text.ok()) {
    return p.Fail("messages",
                  absl::StrCat("the chat template rejected the messages: ", text.status().message()));
  }
  auto ids =
      p.Encode("messages", *text, model, /*add_special_tokens=*/!model.chat_template->StartsWithBos(*text));
  if (!ids) return false;
  g.prompt = std::move(*ids);
  return true;
}

}  // namespace

bool ChatInto(Params& p, const ModelContext& model, OpenAiRequest& r, const GenerateJob& common) {
  GenerateJob g = common;
  if (!p.Bool("logprobs", &r.logprobs)) return false;
  int64_t top = 0;
  if (!p.Integer("top_logprobs", 0, kMaxTopLogprobs, &top)) return false;
  if (p.Has("top_logprobs") && !r.logprobs)
    return p.Fail("top_logprobs", "top_logprobs needs logprobs set to true");
  r.top_logprobs = static_cast<int>(top);
  g.request.sampling.num_top_logprobs = r.top_logprobs;
  std::string forced;
  if (!ToolChoiceOf(p, &forced)) return false;
  bool store = false;
  if (!p.Bool("store", &store)) return false;
  if (store) return p.Fail("store", "store is not supported");
  if (model.chat_template == nullptr || model.tokenizer == nullptr) {
    return p.Fail("messages",
                  "this model has no chat template (tokenizer_config.json chat_template); use "
                  "/v1/completions");
  }
  Json messages;
  if (!MessagesOf(p, &messages)) return false;
  Json tools;
  if (p.Has("tools")) {
    if (!p.At("tools").is_array()) return p.Fail("tools", "tools must be a list");
    if (!(p.Has("tool_choice") && p.At("tool_choice") == "none")) tools = p.At("tools");
  }
  if (!ToolCallsInto(p, model, forced, tools, r, g)) return false;
  if (!RenderPrompt(p, model, messages, tools, g.request)) return false;
  const std::string length_param = p.Has("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (!SetLength(p, model, length_param, -1, "messages", g.request)) return false;
  r.prompts.push_back(std::move(g));
  return true;
}

}  // namespace openai
}  // namespace shardlm
