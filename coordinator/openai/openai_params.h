// The checking of an OpenAI request body's parameters, shared by the
// endpoints' parsers (coordinator/openai/openai_api.cc: what both endpoints and
// /v1/completions take; coordinator/openai/openai_chat.cc: /v1/chat/completions).
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/openai/openai_api.h"
#include "coordinator/openai_wire/params.h"
#include "step/sampling_limits.h"

namespace shardlm {
namespace openai {

// Sets max_new_tokens from the endpoint's parameter (or the rest of the
// context) and checks the prompt fits.
bool SetLength(Params& p, const ModelContext& model, const std::string& param, int64_t default_tokens,
               const std::string& prompt_param, EngineRequest& g);

// The parameters of /v1/chat/completions alone (coordinator/openai/openai_chat.cc):
// the messages rendered by the model's chat template into one prompt, with
// the tools offered.
bool ChatInto(Params& p, const ModelContext& model, OpenAiRequest& r, const GenerateJob& common);

}  // namespace openai
}  // namespace shardlm
