// The engine's own request and result: what every front end (gRPC, the
// OpenAI HTTP API, the CLI and batch files) builds for Engine::Submit and
// reads back. Checked once, by Engine::Validate, against one table of limits
// (step/sampling_limits.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "constraints/matcher.h"
#include "step/step.h"

namespace shardlm {

enum class FinishReason { kNone, kLength, kStop };
inline const char* FinishReasonName(FinishReason r) {
  return r == FinishReason::kLength ? "length" : r == FinishReason::kStop ? "stop" : "none";
}

struct TopLogprob {
  int32_t id;
  float logprob;
};

struct EngineRequest {
  // KV handle of an earlier result whose tokens come before `prompt` (empty:
  // none). Its blocks are shared, the partly filled last one copied.
  std::string prefix_handle;
  // With prefix_handle: attach only its first tokens (0: all of them). A
  // conversation whose history re-renders differently from what was generated
  // (a template that trims a reply) reuses the handle up to the first difference.
  int32_t prefix_length = 0;
  std::vector<int32_t> prompt;  // may be empty when a prefix handle is given
  SamplingParams sampling;
  bool has_seed = false;  // otherwise a random seed is drawn
  int32_t max_new_tokens = 16;
  std::vector<int32_t> stop_token_ids;  // besides the model's EOS ids
  bool ignore_eos = false;
  bool score_prompt = false;  // fill EngineResult::prompt_scores (and prompt_top)
  bool next_top = false;      // fill EngineResult::next_top after the prompt
  bool keep_handle = false;   // keep the KV as a handle (EngineResult::handle)
  // With keep_handle: keep it only while kept handles stay within half their
  // share of the cache (the rest is for the handles clients ask for); past it
  // the blocks are freed and the request still succeeds (EngineResult::handle
  // empty) instead of failing RESOURCE_EXHAUSTED.
  bool keep_handle_if_room = false;
  // The handle is the service's own and lives briefly (n > 1 samples'
  // shared prompt): not counted against Options::max_handle_share.
  bool transient_handle = false;
  // Speculative decoding where the engine has it on (docs/speculative_decoding.md);
  // false: this request decodes one token a step.
  bool speculate = true;
  // Who asks (an API key's id; empty without keys): a handle is visible to
  // its owner only, to anyone else it is NOT_FOUND.
  std::string owner;
  // For logs: the public request id, carried into the workers' logs.
  std::string request_id;
  // When the call arrived (time to first token counts from here); unset: at Submit.
  std::chrono::steady_clock::time_point arrival{};
  // The call's deadline (gRPC's); unset: none. Once it has passed, the engine
  // plans no more of the request: it ends DEADLINE_EXCEEDED when the next
  // step is planned, by the engine's own clock, and its blocks are free once
  // the steps already sent (at most two) are applied. A front end's
  // cancellation arrives later than that on a busy host, after a step more.
  std::chrono::steady_clock::time_point deadline{};
  // Decoding constrained to a language (docs/structured_outputs.md): a matcher
  // in its start state, compiled by the front end; each sequence decodes
  // with its own clone. Null: unconstrained.
  std::shared_ptr<const Matcher> constraint;
  // Called for each generated token as soon as it is sampled, with its
  // top-n alternatives when asked for.
  std::function<void(int32_t token, float logprob, const std::vector<TopLogprob>& top)> on_token;
};

struct EngineResult {
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<TopLogprob>> top_logprobs;  // per generated token
  std::vector<std::optional<float>> prompt_scores;    // per prompt token; empty for the very first token
  std::vector<std::vector<TopLogprob>> prompt_top;    // per prompt token: top-n at its position
  std::vector<TopLogprob> next_top;                   // top-n of the next token after the prompt
  int32_t prefix_tokens = 0;                          // tokens that came from the prefix handle
  int32_t cached_tokens = 0;     // prompt tokens whose KV was reused (handle or prefix cache)
  std::string handle;            // when keep_handle: the KV handle of prefix + prompt + tokens
  int64_t handle_expiry_ms = 0;  // unix time in ms
  FinishReason finish_reason = FinishReason::kNone;
  // With a constraint: it had not accepted the output when max_new_tokens ended it.
  bool constraint_unfinished = false;
  // Speculative decoding: tokens proposed and verified, and of those accepted.
  int32_t proposed_tokens = 0;
  int32_t accepted_tokens = 0;
  // When its first and last tokens were drawn (unset without tokens).
  std::chrono::steady_clock::time_point first_token{}, last_token{};
  absl::Status status;
};

}  // namespace shardlm
