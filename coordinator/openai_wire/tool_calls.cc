#include "coordinator/openai_wire/tool_calls.h"

#include <algorithm>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "constraints/constraint.h"

namespace shardlm {
namespace {

using ToolJson = nlohmann::json;

std::string_view Trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";

// The key a format puts a call's arguments under.
const char* ArgumentsKey(ToolFormat f) { return f == ToolFormat::kLlama ? "parameters" : "arguments"; }

ToolJson ParseOrNull(std::string_view text) {
  return ToolJson::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

// `j` as a call of a known function: {"name": N, "arguments" | "parameters": {...}}.
bool AsCall(const ToolJson& j, const std::set<std::string>& names, ToolCall* out) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  const std::string name = j["name"].get<std::string>();
  if (!names.count(name)) return false;
  ToolJson args = ToolJson::object();
  for (const char* key : {"arguments", "parameters"}) {
    if (!j.contains(key)) continue;
    args = j[key];
    // Some models write the arguments as a JSON string, as OpenAI sends them.
    if (args.is_string()) args = ParseOrNull(args.get<std::string>());
    break;
  }
  if (!args.is_object()) return false;
  out->name = name;
  out->arguments = args.dump();
  return true;
}

// Every element of `j` (an object or a list of objects) as a call, or nothing.
bool AsCalls(const ToolJson& j, const std::set<std::string>& names, std::vector<ToolCall>* out) {
  std::vector<ToolCall> calls;
  for (const ToolJson& item : j.is_array() ? j : ToolJson::array({j})) {
    ToolCall c;
    if (!AsCall(item, names, &c)) return false;
    calls.push_back(std::move(c));
  }
  if (calls.empty()) return false;
  *out = std::move(calls);
  return true;
}

ParsedReply ParseHermes(const std::string& text, const std::set<std::string>& names) {
  ParsedReply r;
  std::string content;
  size_t pos = 0;
  while (true) {
    const size_t open = text.find(kHermesOpen, pos);
    const size_t close = open == std::string::npos ? open : text.find(kHermesClose, open);
    ToolCall call;
    if (close == std::string::npos ||
        !AsCall(ParseOrNull(Trim(std::string_view(text).substr(open + kHermesOpen.size(),
                                                               close - open - kHermesOpen.size()))),
                names, &call)) {
      // No (further) well-formed call: the rest is text.
      content += text.substr(pos);
      break;
    }
    content += text.substr(pos, open - pos);
    r.calls.push_back(std::move(call));
    pos = close + kHermesClose.size();
  }
  r.content = std::string(Trim(content));
  return r;
}

// A reply that is its calls alone, after `marker` (may be empty) and any text before it.
ParsedReply ParseAfterMarker(const std::string& text, std::string_view marker,
                             const std::set<std::string>& names) {
  ParsedReply r;
  size_t at = marker.empty() ? std::string::npos : text.find(marker);
  std::string_view calls_text = text;
  std::string_view before;
  if (at != std::string::npos) {
    before = std::string_view(text).substr(0, at);
    calls_text = std::string_view(text).substr(at + marker.size());
  }
  if (!AsCalls(ParseOrNull(Trim(calls_text)), names, &r.calls)) {
    r.calls.clear();
    r.content = std::string(Trim(text));
    return r;
  }
  r.content = std::string(Trim(before));
  return r;
}

// `marker` at its first place in text, or the start of a suffix that may grow into it.
size_t BeforeMarker(const std::string& text, std::string_view marker) {
  const size_t at = text.find(marker);
  if (at != std::string::npos) return at;
  for (size_t n = std::min(marker.size() - 1, text.size()); n > 0; --n) {
    if (std::string_view(text).substr(text.size() - n) == marker.substr(0, n)) return text.size() - n;
  }
  return text.size();
}

}  // namespace

ToolFormat ToolFormatOf(const std::string& source) {
  if (source.find(kHermesOpen) != std::string::npos) return ToolFormat::kHermes;
  if (source.find(kMistralMarker) != std::string::npos) return ToolFormat::kMistral;
  if (source.find(kPythonTag) != std::string::npos || source.find("ipython") != std::string::npos) {
    return ToolFormat::kLlama;
  }
  return ToolFormat::kHermes;
}

std::set<std::string> ToolNames(const ToolJson& tools) {
  std::set<std::string> names;
  if (!tools.is_array()) return names;
  for (const ToolJson& t : tools) {
    if (t.is_object() && t.contains("function") && t["function"].is_object() &&
        t["function"].contains("name") && t["function"]["name"].is_string()) {
      names.insert(t["function"]["name"].get<std::string>());
    }
  }
  return names;
}

ParsedReply ParseToolCalls(ToolFormat format, const std::string& text, const std::set<std::string>& names) {
  switch (format) {
    case ToolFormat::kHermes:
      return ParseHermes(text, names);
    case ToolFormat::kMistral:
      // The marker is a special token that the reply's text may have lost.
      return text.find(kMistralMarker) != std::string::npos ? ParseAfterMarker(text, kMistralMarker, names)
                                                            : ParseAfterMarker(text, "", names);
    case ToolFormat::kLlama:
      return ParseAfterMarker(text, text.find(kPythonTag) != std::string::npos ? kPythonTag : "", names);
  }
  return ParsedReply{text, {}};
}

size_t PlainTextPrefix(ToolFormat format, const std::string& text) {
  switch (format) {
    case ToolFormat::kHermes:
      return BeforeMarker(text, kHermesOpen);
    case ToolFormat::kMistral:
      return BeforeMarker(text, kMistralMarker);
    case ToolFormat::kLlama: {
      // The whole reply is a call or none: held while it may still become one.
      const size_t first = text.find_first_not_of(" \t\r\n");
      if (first == std::string::npos) return 0;
      return text[first] == '{' || text[first] == '[' || text[first] == '<' ? 0 : text.size();
    }
  }
  return text.size();
}

std::string ForcedCallGrammar(ToolFormat format, const ToolJson& tools, const std::string& only) {
  const char* args_key = ArgumentsKey(format);
  ToolJson any = ToolJson::array();
  for (const ToolJson& t : tools) {
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object()) continue;
    const ToolJson& fn = t["function"];
    if (!fn.contains("name") || !fn["name"].is_string()) continue;
    const std::string name = fn["name"].get<std::string>();
    if (!only.empty() && name != only) continue;
    ToolJson params = fn.contains("parameters") && fn["parameters"].is_object()
                          ? fn["parameters"]
                          : ToolJson{{"type", "object"}};
    any.push_back({{"type", "object"},
                   {"properties", {{"name", {{"const", name}}}, {args_key, params}}},
                   {"required", {"name", args_key}},
                   {"additionalProperties", false}});
  }
  ToolJson schema = any.size() == 1 ? any[0] : ToolJson{{"anyOf", any}};
  schema["x-guidance"] = JsonLayoutOptions();
  const std::string call = "call: %json " + schema.dump() + "\n";
  switch (format) {
    case ToolFormat::kHermes: {
      std::string open(kHermesOpen), close("\n");
      open += "\n";
      close += kHermesClose;
      return absl::StrCat("start: ", ToolJson(open).dump(), " call ", ToolJson(close).dump(), "\n", call);
    }
    case ToolFormat::kMistral:
      return absl::StrCat("start: ", ToolJson(std::string(kMistralMarker) + "[").dump(), " call \"]\"\n",
                          call);
    case ToolFormat::kLlama:
      return "start: call\n" + call;
  }
  return "start: call\n" + call;
}

}  // namespace shardlm
