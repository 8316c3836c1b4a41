// A prompt of chat turns for the stateful APIs (docs/stateful_apis.md section 5):
// a system message, then the turns oldest first, through the model's chat
// template, tokenized as chat completions does. When it is too long, the oldest
// turns are dropped (if allowed) until it fits: bisection, O(log n) renders.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/openai_wire/api_error.h"
#include "coordinator/openai_wire/model_context.h"
#include "coordinator/serving/call_record.h"
#include "coordinator/serving/serving_core.h"

namespace shardlm {
namespace stateful {

using openai::Json;

struct PromptSpec {
  std::string system;        // empty: no system message
  std::vector<Json> turns;   // chat messages ({role, content}, tool calls and outputs), oldest first
  Json tools;                // the functions offered, in chat's form; null: none
  size_t first = 0;          // turns before it are left out
  bool may_drop = true;      // drop the oldest turns (keeping the newest) to fit
  int64_t budget = 0;        // prompt tokens at most
  std::string budget_param;  // what an error names when even the newest turn does not fit
};

struct BuiltPrompt {
  std::vector<int32_t> ids;
  size_t first = 0;  // the first turn in it
};

absl::StatusOr<BuiltPrompt> BuildPrompt(const ServingCore& core, const openai::ModelContext& model,
                                        const PromptSpec& spec, const CallRecord& call);

}  // namespace stateful
}  // namespace shardlm
