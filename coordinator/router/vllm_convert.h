// vLLM's engine protocol (proto/vllm/grpc/engine/vllm_engine.proto) in the serving core's
// terms and back, each direction written once (docs/routers.md says field by field):
//   - a GenerateRequest's sampling parameters become a GenerateJob; what the engine lacks
//     (min_tokens, logprobs, prompt_logprobs, structural_tag, n > 1 streamed) is
//     INVALID_ARGUMENT naming the field, never dropped;
//   - the session's GenerateUpdates become token-delta chunks and one GenerateComplete per
//     sample (VllmReplyWriter).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/serving/generate_job.h"
#include "coordinator/serving/generate_update.h"
#include "vllm/grpc/engine/vllm_engine.pb.h"

namespace shardlm {

// What a request is checked against.
struct VllmLimits {
  int64_t max_context = 0;  // prompt + generated tokens at most
  int32_t vocab_size = 0;
  std::string prompt_field = "tokenized.input_ids";  // what errors about the prompt name ("text")
};

// The job of a request whose prompt is `prompt` (the request's input_ids, or its text
// tokenized by the service): sampling, stop strings and ids, the constraint, n, the length
// (an unset max_tokens: the rest of the context), truncate_prompt_tokens applied. Errors
// name the request's field ("sampling_params.min_tokens").
absl::StatusOr<GenerateJob> VllmJob(const ::vllm::grpc::engine::GenerateRequest& req,
                                    std::vector<int32_t> prompt, const VllmLimits& limits);

// The input ids of a tokenized request, checked against the vocabulary.
absl::StatusOr<std::vector<int32_t>> VllmInputIds(const ::vllm::grpc::engine::TokenizedInput& in,
                                                  int32_t vocab_size);

// An error of the serving core or the engine, told in this protocol's names: the field it
// is about ("top_k" -> "sampling_params.top_k", "prompt" -> `prompt_field`) as the payload,
// and max_tokens for max_new_tokens, sampling_params. for constraint. in the message.
absl::Status VllmStatus(const absl::Status& status, const std::string& prompt_field = "tokenized.input_ids");

// One call's replies. Streaming, each update's new tokens are a chunk (with the counts so
// far); at the end each sample gets a GenerateComplete with all its tokens. A token that
// ended a sample by being a stop token (an EOS id, unless ignore_eos, or one of
// stop_token_ids) is left out of both, as the gateway detokenizes what it gets, unless
// include_stop_str_in_output. The engine ends a sample at the first such token
// (Engine::IsStop, with the same EOS ids), so one can only be a sample's last.
class VllmReplyWriter {
 public:
  VllmReplyWriter(const ::vllm::grpc::engine::GenerateRequest& req, const std::vector<int32_t>& eos_ids,
                  int n);
  void Write(const GenerateUpdate& update, std::deque<::vllm::grpc::engine::GenerateResponse>* out);

 private:
  bool Shown(int32_t token) const;

  bool stream_;
  std::vector<int32_t> hidden_;                // stop tokens left out of the output
  std::vector<std::vector<uint32_t>> output_;  // each sample's tokens so far
  std::vector<uint32_t> generated_;            // each sample's count, hidden tokens included
  uint32_t prompt_tokens_ = 0;
};

}  // namespace shardlm
