#include "coordinator/stateful/thread_prompt.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "chat/chat_template.h"
#include "common/status.h"

namespace shardlm {
namespace stateful {
namespace {

// A stored message's text: its text parts, one after another.
std::string TextOf(const MessageRow& m) {
  std::string text;
  for (const Json& part : Json::parse(m.content)) {
    if (part.value("type", "") == "text") absl::StrAppend(&text, part["text"]["value"].get<std::string>());
  }
  return text;
}

std::string SystemText(const Json& config) {
  std::string text = config.value("instructions", "");
  const std::string extra =
      config.contains("additional_instructions") && config["additional_instructions"].is_string()
          ? config["additional_instructions"].get<std::string>()
          : "";
  if (!extra.empty()) absl::StrAppend(&text, text.empty() ? "" : "\n\n", extra);
  return text;
}

// The chat messages: the system text, then messages[first..] (empty assistant replies left out).
Json ChatMessages(const std::string& system, const std::vector<MessageRow>& history, size_t first) {
  Json messages = Json::array();
  if (!system.empty()) messages.push_back(Json{{"role", "system"}, {"content", system}});
  for (size_t i = first; i < history.size(); ++i) {
    std::string text = TextOf(history[i]);
    if (text.empty() && history[i].role == "assistant") continue;
    messages.push_back(Json{{"role", history[i].role}, {"content", std::move(text)}});
  }
  return messages;
}

absl::StatusOr<std::vector<int32_t>> Render(const ServingCore& core, const openai::ModelContext& model,
                                            const Json& messages, const CallRecord& call) {
  absl::StatusOr<std::string> text =
      model.chat_template->Apply(messages, /*add_generation_prompt=*/true, Json(), Json());
  if (!text.ok()) {
    return InvalidField("thread",
                        absl::StrCat("the chat template rejected the thread: ", text.status().message()));
  }
  return core.EncodeForCall(*text, !model.chat_template->StartsWithBos(*text), "messages", call);
}

}  // namespace

absl::StatusOr<ThreadPrompt> BuildThreadPrompt(const ServingCore& core, const openai::ModelContext& model,
                                               const Json& config, const std::vector<MessageRow>& history,
                                               const CallRecord& call) {
  if (model.chat_template == nullptr) {
    return InvalidField("model", "this model has no chat template (tokenizer_config.json chat_template)");
  }
  const std::string system = SystemText(config);
  const Json& truncation = config.contains("truncation_strategy") ? config["truncation_strategy"] : Json();
  size_t first = 0;
  if (truncation.is_object() && truncation.value("type", "") == "last_messages" &&
      truncation["last_messages"].is_number_integer()) {
    const size_t keep = truncation["last_messages"].get<size_t>();
    first = history.size() > keep ? history.size() - keep : 0;
  }
  const int64_t budget =
      std::min<int64_t>(model.max_context - 1, config.contains("max_prompt_tokens") &&
                                                       config["max_prompt_tokens"].is_number_integer()
                                                   ? config["max_prompt_tokens"].get<int64_t>()
                                                   : INT64_MAX);
  auto fits = [&](size_t from) -> absl::StatusOr<std::optional<std::vector<int32_t>>> {
    absl::StatusOr<std::vector<int32_t>> ids = Render(core, model, ChatMessages(system, history, from), call);
    if (!ids.ok() && !absl::IsInvalidArgument(ids.status())) return ids.status();
    if (!ids.ok() && ErrorField(ids.status()) != "messages") return ids.status();
    if (!ids.ok() || static_cast<int64_t>(ids->size()) > budget) return std::optional<std::vector<int32_t>>();
    return std::optional<std::vector<int32_t>>(std::move(*ids));
  };
  SHARDLM_ASSIGN_OR_RETURN(std::optional<std::vector<int32_t>> whole, fits(first));
  if (whole) return ThreadPrompt{std::move(*whole), static_cast<int>(first)};
  // `auto`: the fewest oldest messages dropped that make it fit (fitting only gets easier
  // as more are dropped), by bisection: O(log n) renders.
  if (history.size() <= first + 1 || (truncation.is_object() && truncation.value("type", "") != "auto")) {
    return InvalidField("max_prompt_tokens", absl::StrCat("the thread's prompt is longer than ", budget,
                                                          " tokens (max_prompt_tokens and the context)"));
  }
  size_t lo = first + 1, hi = history.size() - 1;  // drop [first, lo) at least; keep the newest message
  SHARDLM_ASSIGN_OR_RETURN(std::optional<std::vector<int32_t>> newest, fits(hi));
  if (!newest) {
    return InvalidField("max_prompt_tokens",
                        absl::StrCat("the thread's newest message alone is longer than ", budget,
                                     " tokens (max_prompt_tokens and the context)"));
  }
  std::vector<int32_t> best = std::move(*newest);
  size_t best_from = hi;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    SHARDLM_ASSIGN_OR_RETURN(std::optional<std::vector<int32_t>> ids, fits(mid));
    if (ids) {
      best = std::move(*ids);
      best_from = mid;
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return ThreadPrompt{std::move(best), static_cast<int>(best_from)};
}

}  // namespace stateful
}  // namespace shardlm
