// The pieces of an Ollama request's checking that live in their own files
// (ollama_request.cc holds the rest): `options`, and /api/chat's messages and
// tools. Each fails through `p` (openai_wire/params.h), naming the field.
#pragma once

#include <cstdint>

#include "coordinator/ollama/ollama_request.h"
#include "coordinator/openai_wire/params.h"

namespace shardlm {
namespace ollama {

// What `options` says about length: the request's context (num_ctx, else the
// served one) and num_predict (< 0: up to the context).
struct Lengths {
  int64_t context = 0;
  int64_t num_predict = -1;
};

// `options` into the job's sampling and stop strings, with Ollama's defaults
// for what it leaves out; errors name "options.<key>".
bool OptionsInto(openai::Params& p, const openai::ModelContext& model, GenerateJob& job, Lengths* lengths);

// /api/chat's messages and tools through the chat template into the job's prompt.
bool ChatPromptInto(openai::Params& p, const openai::ModelContext& model, OllamaRequest& r);

// think: false (or absent) passes enable_thinking false to the template; true is refused.
bool ThinkOf(openai::Params& p, const std::string& model, Json* template_extra);

}  // namespace ollama
}  // namespace shardlm
