// Ollama's /api/generate and /api/chat bodies, checked and translated into the
// serving core's GenerateJob (docs/ollama.md "Requests" and "Options"). No HTTP
// here: ollama_api.cc runs what this returns and ollama_reply.h writes it back.
//
//   OllamaRequest r;
//   OllamaError error;
//   if (!ParseOllamaRequest(OllamaEndpoint::kChat, body, model, &r, &error, stop)) return Reply(error);
//   StreamGenerate(core, r.job, owner, call, ...);
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "chat/fill_in_middle.h"
#include "coordinator/openai_wire/api_error.h"
#include "coordinator/openai_wire/model_context.h"
#include "coordinator/openai_wire/tool_calls.h"
#include "coordinator/serving/generate_job.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {
namespace ollama {

using Json = openai::Json;

enum class OllamaEndpoint { kGenerate, kChat };

// An error as Ollama answers it: the status and {"error": message}; the
// message names the field and the limit.
struct OllamaError {
  int status = 400;
  std::string message;
};

struct OllamaRequest {
  OllamaEndpoint endpoint = OllamaEndpoint::kGenerate;
  std::string model;   // as the client sent it: every reply echoes it
  bool stream = true;  // Ollama streams unless told `stream: false`
  // An empty prompt or message list: the model is "loaded" (it always is) and
  // the reply is done at once with done_reason "load".
  bool load_only = false;
  GenerateJob job;
  bool return_context = false;  // generate without raw: the final chunk carries prompt + reply ids
  bool logprobs = false;
  int top_logprobs = 0;
  // Tools offered: replies are parsed into tool_calls.
  bool parse_tool_calls = false;
  ToolFormat tool_format = ToolFormat::kHermes;
  std::set<std::string> tool_names;
};

// Checks and translates a body; false with *error set otherwise. Tokenizing
// stops once `stop` says the client has gone.
bool ParseOllamaRequest(OllamaEndpoint endpoint, const Json& body, const openai::ModelContext& model,
                        OllamaRequest* out, OllamaError* error, const Tokenizer::StopCheck& stop);

// The served name `name` stands for (bare, with ":latest", in any case), or "".
std::string ServedName(const std::vector<std::string>& served, const std::string& name);

}  // namespace ollama
}  // namespace shardlm
