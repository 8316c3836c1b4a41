// One Generate call as a front end hands it to GenerateSession
// (coordinator/serving/generate_session.h): the engine request every sample starts
// from, plus what the session does around the engine. The gRPC API
// (coordinator/grpc/proto_convert.h) and the OpenAI API (coordinator/openai/openai_api.h)
// each build it straight from their own wire format; nothing converts it again.
#pragma once

#include <string>
#include <vector>

#include "constraints/constraint.h"
#include "coordinator/engine/engine_request.h"

namespace shardlm {

struct GenerateJob {
  // The prompt as token ids, the sampling parameters (defaults filled in),
  // max_new_tokens, stop token ids, ignore_eos, keep_handle (a ChunkResult
  // per sample). The session fills in who asks (owner, request_id, arrival)
  // and the compiled constraint.
  EngineRequest request;
  // What the output must match; compiled once per job by the service, which
  // caches the compiler (ServingCore::CompileConstraint).
  ConstraintSpec constraint;
  int n = 1;                      // samples of the one prompt
  std::vector<std::string> stop;  // stop strings, matched on each sample's text
  // > 0: a line after the first indented less than this ends the text (llama.cpp's n_indent,
  // for fill-in-the-middle: tokenizer/stop_text.h).
  int min_indent = 0;
};

}  // namespace shardlm
