// A run's prompt (docs/stateful_apis.md section 5): a system message of the
// run's instructions, then the thread's messages oldest first, through the
// model's chat template, tokenized. The truncation strategy picks the messages:
// `last_messages` N keeps the newest N; `auto` drops the oldest until the
// prompt fits the context (leaving room for one token) and max_prompt_tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/openai_wire/api_error.h"
#include "coordinator/openai_wire/model_context.h"
#include "coordinator/serving/call_record.h"
#include "coordinator/serving/serving_core.h"
#include "state/rows.h"

namespace shardlm {
namespace stateful {

using openai::Json;

struct ThreadPrompt {
  std::vector<int32_t> ids;
  int dropped = 0;  // oldest messages left out to fit
};

// `config` is the run's (RunObject's fields). INVALID_ARGUMENT naming max_prompt_tokens when
// not even the newest message fits, or the template's error.
absl::StatusOr<ThreadPrompt> BuildThreadPrompt(const ServingCore& core, const openai::ModelContext& model,
                                               const Json& config, const std::vector<MessageRow>& history,
                                               const CallRecord& call);

}  // namespace stateful
}  // namespace shardlm
