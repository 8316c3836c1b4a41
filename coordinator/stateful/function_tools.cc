#include "coordinator/stateful/function_tools.h"

#include "absl/strings/str_cat.h"
#include "chat/chat_template.h"
#include "coordinator/stateful/stateful_params.h"

namespace shardlm {
namespace stateful {
namespace {

// The function tool_choice names, or "" when it names none.
std::string NamedFunction(const Json& choice) {
  if (!choice.is_object() || choice.value("type", "") != "function") return "";
  const Json& holder = choice.contains("function") ? choice["function"] : choice;
  return holder.is_object() && holder.contains("name") && holder["name"].is_string()
             ? holder["name"].get<std::string>()
             : "";
}

}  // namespace

absl::StatusOr<Json> ToolChoiceOf(const Json& body) {
  if (!body.contains("tool_choice") || body["tool_choice"].is_null()) return Json("auto");
  const Json& t = body["tool_choice"];
  if (t == "none" || t == "auto" || t == "required") return t;
  if (!NamedFunction(t).empty()) return t;
  return BadParam("tool_choice",
                  "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", ...} "
                  "naming a function");
}

absl::StatusOr<FunctionTools> FunctionToolsOf(const openai::ModelContext& model, const Json& tools,
                                              const Json& tool_choice, bool parallel) {
  FunctionTools f;
  f.parallel = parallel;
  if (model.chat_template != nullptr) f.format = ToolFormatOf(model.chat_template->sources());
  if (tool_choice == "none") return f;  // offered to nobody: the template sees none either
  f.chat_tools = tools.is_array() ? tools : Json::array();
  f.names = ToolNames(f.chat_tools);
  if (tool_choice == "required") f.forced.assign(1, '*');  // not = "*": GCC 12 -Wrestrict false positive
  const std::string named = NamedFunction(tool_choice);
  if (!named.empty()) f.forced = named;
  if (!f.forced.empty() && f.names.empty()) {
    return BadParam("tool_choice", "tool_choice \"required\" or a named function needs tools");
  }
  if (!named.empty() && !f.names.count(named)) {
    return BadParam("tool_choice", absl::StrCat("tool_choice names the function '", named.substr(0, 64),
                                                "', which is not among tools"));
  }
  return f;
}

absl::Status ConstrainCalls(const FunctionTools& tools, GenerateJob* job) {
  if (tools.forced.empty()) return absl::OkStatus();
  if (!job->constraint.empty()) {
    return BadParam("tool_choice", "the response format and tool_choice each constrain the output; give one");
  }
  job->constraint = {
      ConstraintSpec::Kind::kGrammar,
      ForcedCallGrammar(tools.format, tools.chat_tools, tools.forced == "*" ? "" : tools.forced),
      {}};
  return absl::OkStatus();
}

ParsedReply SplitReply(const FunctionTools& tools, const std::string& text, const absl::Status& ended) {
  if (!ended.ok() || !tools.offered()) return ParsedReply{text, {}};
  ParsedReply reply = ParseToolCalls(tools.format, text, tools.names);
  if (reply.calls.empty()) return ParsedReply{text, {}};  // as chat completions answers it: untouched
  if (!tools.parallel && reply.calls.size() > 1) reply.calls.resize(1);
  return reply;
}

bool MakesMessage(const ParsedReply& reply, bool shown) {
  return reply.calls.empty() || !reply.content.empty() || shown;
}

std::string StreamedText::Take(const std::string& piece) {
  text_ += piece;
  const size_t plain = tools_.offered() ? PlainTextPrefix(tools_.format, text_) : text_.size();
  if (plain <= sent_) return "";
  std::string out = text_.substr(sent_, plain - sent_);
  sent_ = plain;
  return out;
}

}  // namespace stateful
}  // namespace shardlm
