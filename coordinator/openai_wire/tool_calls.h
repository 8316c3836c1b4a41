// Tool calls in a chat model's own syntax (docs/structured_outputs.md): which
// syntax a chat template uses, the grammar that forces one call (tool_choice
// "required" or a named function), and the parser that turns a reply into
// OpenAI's tool_calls (tool_choice "auto", and the forced replies too).
//
//   ToolFormat f = ToolFormatOf(chat_template.sources());
//   std::string lark = ForcedCallGrammar(f, tools, "get_weather");   // -> Constraint.grammar
//   ParsedReply r = ParseToolCalls(f, reply_text, ToolNames(tools));  // r.calls, r.content
//
// The syntaxes, as the templates the project ships write them:
//   kHermes   <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>   (Qwen2.5/3, Hermes; and
//             the default for a template that shows none, such as SmolLM2's ChatML)
//   kLlama    {"name": ..., "parameters": {...}}                         (Llama 3.1-3.3: the whole reply)
//   kMistral  [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]
#pragma once

#include <set>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace shardlm {

enum class ToolFormat { kHermes, kLlama, kMistral };

// The syntax a chat template's source writes tool calls in.
ToolFormat ToolFormatOf(const std::string& template_source);

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text of an object
};

struct ParsedReply {
  std::string content;  // the reply without its calls, trimmed
  std::vector<ToolCall> calls;
};

// The function names of an OpenAI `tools` list ({"type": "function", "function": {"name", ...}}).
std::set<std::string> ToolNames(const nlohmann::json& tools);

// The calls in `text` to functions named in `names`, in order; text that is
// not a well-formed call of a known function stays content.
ParsedReply ParseToolCalls(ToolFormat format, const std::string& text, const std::set<std::string>& names);

// How many leading bytes of a reply being streamed are text no call can start
// in: the rest is held back until it is known (the reply's end).
size_t PlainTextPrefix(ToolFormat format, const std::string& text);

// A Lark grammar (llguidance's syntax) for exactly one call in `format` of the
// function `only` (empty: any of `tools`), its arguments valid against that
// function's `parameters` schema.
std::string ForcedCallGrammar(ToolFormat format, const nlohmann::json& tools, const std::string& only);

}  // namespace shardlm
