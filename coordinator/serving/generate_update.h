// What a Generate call says as it runs, apart from how it travels: the
// serving core's GenerateSession emits these, and each front end writes them
// in its own format (gRPC: shardlm.v1.GenerateResponse in
// coordinator/grpc/proto_convert.h; OpenAI: chunks and objects in
// coordinator/openai/openai_api.h's ResponseWriter).
//
// A call's updates, for n = 2:
//   {sample 0, prompt_token_ids {1, 2, 3}, token_ids {42}, text "Hi"}
//   {sample 1, token_ids {17}, text "Yo"}
//   ...
//   {ends {{0, "stop"}, {1, "length"}}, usage {3, 0, 9}}   // the last one
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/engine/engine_request.h"

namespace shardlm {

// How one sample ended (in the last update).
struct SampleEnd {
  int sample = 0;
  std::string finish_reason;  // "stop", "length", ...
  bool constraint_unfinished = false;
  // The request kept its KV as a handle: what the client's ChunkResult holds.
  std::optional<EngineResult> kept;
};

struct GenerateUsage {
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;
  int32_t generated_tokens = 0;
};

struct GenerateUpdate {
  int sample = 0;
  std::vector<int32_t> prompt_token_ids;  // in the call's first update only
  // The sample's new tokens, with their logprobs and (when asked) each one's
  // top alternatives.
  std::vector<int32_t> token_ids;
  std::vector<float> logprobs;
  std::vector<std::vector<TopLogprob>> top_logprobs;
  std::string text;  // the new text; held back while it could still become a stop string
  // The last update: each sample's end, in sample order, and the usage.
  std::vector<SampleEnd> ends;
  std::optional<GenerateUsage> usage;

  bool last() const { return usage.has_value(); }
};

}  // namespace shardlm
