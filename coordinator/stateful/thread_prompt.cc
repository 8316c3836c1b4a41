#include "coordinator/stateful/thread_prompt.h"

#include <algorithm>
#include <climits>
#include <exception>

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

Json ArgumentsValue(const std::string& arguments) {
  try {
    Json parsed = openai::ParseJson(arguments);
    if (parsed.is_object()) return parsed;
  } catch (const std::exception&) {
  }
  return Json(arguments);
}

namespace {

// A completed tool_calls step as chat turns: the calls (joined to the reply its run made just
// before, when there is one), then one tool turn per output.
void AddToolTurns(const RunStepRow& step, std::vector<Json>* turns, const std::string* last_run) {
  const Json details = Json::parse(step.step_details);
  Json calls = Json::array();
  std::vector<Json> outputs;
  for (const Json& c : details.value("tool_calls", Json::array())) {
    const Json& fn = c["function"];
    calls.push_back(
        Json{{"id", c["id"]},
             {"type", "function"},
             {"function", {{"name", fn["name"]}, {"arguments", ArgumentsValue(fn["arguments"])}}}});
    outputs.push_back(Json{{"role", "tool"},
                           {"tool_call_id", c["id"]},
                           {"content", fn["output"].is_string() ? fn["output"].get<std::string>() : ""}});
  }
  if (last_run != nullptr && *last_run == step.run_id && !turns->empty() &&
      turns->back().value("role", "") == "assistant") {
    turns->back()["tool_calls"] = std::move(calls);
  } else {
    turns->push_back(Json{{"role", "assistant"}, {"content", ""}, {"tool_calls", std::move(calls)}});
  }
  for (Json& o : outputs) turns->push_back(std::move(o));
}

// The messages and the tool steps merged by seq.
std::vector<Json> ThreadTurns(const std::vector<MessageRow>& history, const std::vector<RunStepRow>& steps) {
  std::vector<Json> turns;
  std::string last_run;  // the run of the newest turn, when it is a reply
  size_t s = 0;
  auto steps_before = [&](int64_t seq) {
    for (; s < steps.size() && steps[s].seq < seq; ++s) {
      AddToolTurns(steps[s], &turns, last_run.empty() ? nullptr : &last_run);
      last_run.clear();
    }
  };
  for (const MessageRow& m : history) {
    steps_before(m.seq);
    std::string text = MessageText(m);
    if (text.empty() && m.role == "assistant") continue;
    turns.push_back(Json{{"role", m.role}, {"content", std::move(text)}});
    last_run = m.role == "assistant" && m.run_id ? *m.run_id : "";
  }
  steps_before(INT64_MAX);
  return turns;
}

}  // namespace

absl::StatusOr<BuiltPrompt> BuildThreadPrompt(const ServingCore& core, const openai::ModelContext& model,
                                              const Json& config, const std::vector<MessageRow>& history,
                                              const std::vector<RunStepRow>& tool_steps, const Json& tools,
                                              const CallRecord& call) {
  PromptSpec spec;
  spec.system = config.value("instructions", "");
  const Json& extra = config.contains("additional_instructions") ? config["additional_instructions"] : Json();
  if (extra.is_string() && !extra.get<std::string>().empty()) {
    absl::StrAppend(&spec.system, spec.system.empty() ? "" : "\n\n", extra.get<std::string>());
  }
  spec.turns = ThreadTurns(history, tool_steps);
  spec.tools = tools;
  const Json& truncation = config.contains("truncation_strategy") ? config["truncation_strategy"] : Json();
  if (truncation.is_object() && truncation.value("type", "") == "last_messages" &&
      truncation["last_messages"].is_number_integer()) {
    const size_t keep = truncation["last_messages"].get<size_t>();
    spec.first = spec.turns.size() > keep ? spec.turns.size() - keep : 0;
    // A tool output shows with the call it answers: the window starts at the assistant's calls.
    while (spec.first > 0 && spec.turns[spec.first].value("role", "") == "tool") --spec.first;
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
