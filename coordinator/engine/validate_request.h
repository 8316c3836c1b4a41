// The one check of an engine request, whichever front end built it: every
// sampling bound from the one table (step/sampling_limits.h), the prompt
// against the vocabulary, the context and the KV cache. An error is
// InvalidArgument naming the field and the limit, with the field also as a
// structured payload (common/status.h: ErrorField) for front ends that name the
// parameter (OpenAI's `param`, a gRPC field violation).
//
//   SHARDLM_RETURN_IF_ERROR(ValidateRequest(request, {.vocab_size = 49152, ...}));
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "coordinator/engine/engine_request.h"

namespace shardlm {

// What a request is checked against.
struct RequestBounds {
  int64_t vocab_size = 0;
  int64_t context_length = 0;  // the model's max_position_embeddings
  int32_t num_blocks = 0;      // of the KV cache
  int32_t block_size = 0;
  int64_t prefix_length = 0;  // tokens of the request's prefix handle (checked live by the caller)
};

absl::Status ValidateRequest(const EngineRequest& request, const RequestBounds& bounds);

}  // namespace shardlm
