// A run's prompt (docs/stateful_apis.md section 5): a system message of the
// run's instructions (and additional_instructions), then the thread's messages
// oldest first (empty assistant replies left out) with the function calls of
// its completed tool_calls steps in their place (an assistant turn of calls, a
// tool turn per output), as chat_prompt.h builds it with the run's tools.
// The truncation strategy picks the messages: `last_messages` N keeps the
// newest N; `auto` drops the oldest until the prompt fits the context (leaving
// room for one token) and max_prompt_tokens.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/stateful/chat_prompt.h"
#include "state/rows.h"

namespace shardlm {
namespace stateful {

// `config` is the run's (RunObject's fields). INVALID_ARGUMENT naming max_prompt_tokens when
// the prompt cannot fit.
absl::StatusOr<BuiltPrompt> BuildThreadPrompt(const ServingCore& core, const openai::ModelContext& model,
                                              const Json& config, const std::vector<MessageRow>& history,
                                              const std::vector<RunStepRow>& tool_steps, const Json& tools,
                                              const CallRecord& call);

// A call's arguments as templates take them: the JSON object when the text is one, else the text.
Json ArgumentsValue(const std::string& arguments);

// A stored message's text: its text parts, one after another.
std::string MessageText(const MessageRow& m);

}  // namespace stateful
}  // namespace shardlm
