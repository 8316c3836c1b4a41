#include "coordinator/stateful/chat_prompt.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "chat/chat_template.h"
#include "common/status.h"

namespace shardlm {
namespace stateful {
namespace {

Json ChatMessages(const PromptSpec& spec, size_t from) {
  Json messages = Json::array();
  if (!spec.system.empty()) messages.push_back(Json{{"role", "system"}, {"content", spec.system}});
  for (size_t i = from; i < spec.turns.size(); ++i) messages.push_back(spec.turns[i]);
  return messages;
}

// The ids of the prompt from turn `from` on; nothing when it is longer than the budget.
absl::StatusOr<std::optional<std::vector<int32_t>>> Fitting(const ServingCore& core,
                                                            const openai::ModelContext& model,
                                                            const PromptSpec& spec, size_t from,
                                                            const CallRecord& call) {
  absl::StatusOr<std::string> text =
      model.chat_template->Apply(ChatMessages(spec, from), /*add_generation_prompt=*/true,
                                 spec.tools.is_array() && !spec.tools.empty() ? spec.tools : Json(), Json());
  if (!text.ok()) {
    return InvalidField(
        "input", absl::StrCat("the chat template rejected the conversation: ", text.status().message()));
  }
  // Refused before tokenizing when the text alone is longer than the context could hold.
  absl::StatusOr<std::vector<int32_t>> ids =
      core.EncodeForCall(*text, !model.chat_template->StartsWithBos(*text), "messages", call);
  if (!ids.ok() && absl::IsInvalidArgument(ids.status())) return std::optional<std::vector<int32_t>>();
  if (!ids.ok()) return ids.status();
  if (static_cast<int64_t>(ids->size()) > spec.budget) return std::optional<std::vector<int32_t>>();
  return std::optional<std::vector<int32_t>>(std::move(*ids));
}

absl::Status TooLong(const PromptSpec& spec, bool newest_alone) {
  return InvalidField(
      spec.budget_param,
      absl::StrCat(newest_alone ? "the newest message alone" : "the prompt", " is longer than ", spec.budget,
                   " tokens (", spec.budget_param, " and the model's context)"));
}

}  // namespace

absl::StatusOr<BuiltPrompt> BuildPrompt(const ServingCore& core, const openai::ModelContext& model,
                                        const PromptSpec& spec, const CallRecord& call) {
  if (model.chat_template == nullptr) {
    return InvalidField("model", "this model has no chat template (tokenizer_config.json chat_template)");
  }
  SHARDLM_ASSIGN_OR_RETURN(auto whole, Fitting(core, model, spec, spec.first, call));
  if (whole) return BuiltPrompt{std::move(*whole), spec.first};
  if (!spec.may_drop || spec.turns.size() <= spec.first + 1) return TooLong(spec, false);
  // Fitting only gets easier as more are dropped: find the fewest dropped, keeping the newest turn.
  size_t lo = spec.first + 1, hi = spec.turns.size() - 1;
  SHARDLM_ASSIGN_OR_RETURN(auto newest, Fitting(core, model, spec, hi, call));
  if (!newest) return TooLong(spec, true);
  BuiltPrompt best{std::move(*newest), hi};
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    SHARDLM_ASSIGN_OR_RETURN(auto ids, Fitting(core, model, spec, mid, call));
    if (ids) {
      best = BuiltPrompt{std::move(*ids), mid};
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return best;
}

}  // namespace stateful
}  // namespace shardlm
