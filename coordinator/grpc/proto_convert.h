// The gRPC API's messages (proto/shardlm/v1/inference.proto) in the engine's
// terms and back, each direction written once: a GenerateRequest becomes a
// GenerateJob (sampling defaults filled in, the constraint as a
// ConstraintSpec); an EngineResult becomes a ChunkResult or TopLogprobs, and
// the serving core's GenerateUpdate a GenerateResponse.
// The limits are checked later, once, by ValidateRequest and the session.
#pragma once

#include <cstdint>
#include <vector>

#include "constraints/constraint.h"
#include "coordinator/engine/engine_request.h"
#include "coordinator/serving/generate_job.h"
#include "coordinator/serving/generate_update.h"
#include "shardlm/v1/inference.pb.h"

namespace shardlm {

// The engine's sampling parameters from the API's: an unset temperature,
// top_p or repetition_penalty is 1 (off); *has_seed says whether a seed came.
SamplingParams SamplingFromProto(const ::shardlm::v1::SamplingParams& sp, bool* has_seed);

// The constraint as the compiler takes it; json_object false and an unset
// kind are no constraint.
ConstraintSpec ConstraintFromProto(const ::shardlm::v1::Constraint& c);

// A Generate request with its prompt already as token ids (the service
// tokenizes a text prompt: InferenceService::PromptIds).
GenerateJob GenerateJobFromProto(const ::shardlm::v1::GenerateRequest& req, std::vector<int32_t> prompt);

// Appends `top` (most likely first) to `out`.
void FillTop(const std::vector<TopLogprob>& top, ::shardlm::v1::TopLogprobs* out);

// Fills `out` from a finished request (chunk tokens, scores, alternatives,
// handle): the generated tokens when `generated`, else the scored prompt.
void FillChunkResult(const EngineResult& r, bool generated, ::shardlm::v1::ChunkResult* out);

// One update of a Generate call as its stream message (the last one with
// each sample's result, its ChunkResult when kept, and the usage).
::shardlm::v1::GenerateResponse GenerateResponseFromUpdate(const GenerateUpdate& update);

}  // namespace shardlm
