#include "coordinator/stateful/thread_prompt.h"

#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"

namespace shardlm {
namespace stateful {

std::string MessageText(const MessageRow& m) {
  std::string text;
  for (const Json& part : Json::parse(m.content)) {
    if (part.value("type", "") == "text") absl::StrAppend(&text, part["text"]["value"].get<std::string>());
  }
  return text;
}

absl::StatusOr<BuiltPrompt> BuildThreadPrompt(const ServingCore& core, const openai::ModelContext& model,
                                              const Json& config, const std::vector<MessageRow>& history,
                                              const CallRecord& call) {
  PromptSpec spec;
  spec.system = config.value("instructions", "");
  const Json& extra = config.contains("additional_instructions") ? config["additional_instructions"] : Json();
  if (extra.is_string() && !extra.get<std::string>().empty()) {
    absl::StrAppend(&spec.system, spec.system.empty() ? "" : "\n\n", extra.get<std::string>());
  }
  for (const MessageRow& m : history) {
    std::string text = MessageText(m);
    if (text.empty() && m.role == "assistant") continue;
    spec.turns.push_back(Json{{"role", m.role}, {"content", std::move(text)}});
  }
  const Json& truncation = config.contains("truncation_strategy") ? config["truncation_strategy"] : Json();
  if (truncation.is_object() && truncation.value("type", "") == "last_messages" &&
      truncation["last_messages"].is_number_integer()) {
    const size_t keep = truncation["last_messages"].get<size_t>();
    spec.first = spec.turns.size() > keep ? spec.turns.size() - keep : 0;
    spec.may_drop = false;
  }
  const Json& max_prompt = config.contains("max_prompt_tokens") ? config["max_prompt_tokens"] : Json();
  spec.budget = std::min<int64_t>(model.max_context - 1,
                                  max_prompt.is_number_integer() ? max_prompt.get<int64_t>() : INT64_MAX);
  spec.budget_param = "max_prompt_tokens";
  return BuildPrompt(core, model, spec, call);
}

}  // namespace stateful
}  // namespace shardlm
