// One assistant reply generated on the serving core, for runs and responses:
// the engine job from the sampling, budget and format a request asked for, and
// the generation with its text as it comes.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/openai_wire/api_error.h"
#include "coordinator/openai_wire/model_context.h"
#include "coordinator/serving/call_record.h"
#include "coordinator/serving/generate_job.h"
#include "coordinator/serving/generate_update.h"
#include "coordinator/serving/serving_core.h"

namespace shardlm {
namespace stateful {

using openai::Json;

struct ReplySettings {
  std::optional<double> temperature;  // unset: 1
  std::optional<double> top_p;
  std::optional<int64_t> max_tokens;  // unset: the rest of the context
  Json format;                        // a response_format object ({type: json_schema, ...}); else none
  std::string format_param;           // its name in errors
};

struct Generated {
  absl::Status status;
  std::string text;
  std::string finish_reason;  // "stop", "length"
  GenerateUsage usage;
};

absl::StatusOr<GenerateJob> ReplyJob(const openai::ModelContext& model, const ReplySettings& settings,
                                     std::vector<int32_t> prompt);

// Runs `job`; `on_text` hears each piece of text; the generation stops (CANCELLED) once
// `cancelled` says so.
Generated GenerateReply(ServingCore& core, GenerateJob job, const std::string& owner, CallRecord& call,
                        const std::function<void(const std::string&)>& on_text,
                        const std::function<bool()>& cancelled);

}  // namespace stateful
}  // namespace shardlm
