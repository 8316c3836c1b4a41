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
#include "coordinator/stateful/kv_turns.h"

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
  std::optional<EngineResult> kept;  // the request kept its KV as a handle
};

// Where a turn finds its conversation's KV and where it files its own (kv_turns.h).
struct TurnKv {
  KvTurnCache* cache = nullptr;  // null: no handles kept
  std::string from;              // the entry the turn starts from ("": none)
  std::string into;              // where its KV is filed ("": not kept)
};

absl::StatusOr<GenerateJob> ReplyJob(const openai::ModelContext& model, const ReplySettings& settings,
                                     std::vector<int32_t> prompt);

// Runs `job`; `on_text` hears each piece of text; the generation stops (CANCELLED) once
// `cancelled` says so.
Generated GenerateReply(ServingCore& core, GenerateJob job, const std::string& owner, CallRecord& call,
                        const std::function<void(const std::string&)>& on_text,
                        const std::function<bool()>& cancelled);

// GenerateReply for a conversation's turn: `job`'s prompt is the whole history rendered; the
// part `kv.from`'s handle holds is attached instead of prefilled, and the turn's KV (prompt
// and reply) is filed under `kv.into` when there is room for it (else the oldest entry is
// released for the next turn). A handle the engine lost is forgotten and the turn prefilled
// whole, once.
Generated GenerateTurn(ServingCore& core, const TurnKv& kv, GenerateJob job, const std::string& owner,
                       CallRecord& call, const std::function<void(const std::string&)>& on_text,
                       const std::function<bool()>& cancelled);

}  // namespace stateful
}  // namespace shardlm
