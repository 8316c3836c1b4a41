#include "coordinator/engine/validate_request.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "step/sampling_limits.h"

namespace shardlm {
namespace {

// InvalidArgument naming `field` (the field first, as the message starts:
// "temperature must be in ...").
template <typename... Parts>
absl::Status Bad(const std::string& field, const Parts&... parts) {
  return WithField(absl::InvalidArgumentError(absl::StrCat(parts...)), field);
}

// The sampling parameters and stop tokens against the one table of bounds
// (step/sampling_limits.h) and the vocabulary.
absl::Status ValidateSampling(const EngineRequest& r, int64_t vocab_size) {
  const SamplingParams& s = r.sampling;
  const std::pair<const char*, std::pair<double, SamplingBound>> bounded[] = {
      {"temperature", {s.temperature, kTemperatureBound}},
      {"top_p", {s.top_p, kTopPBound}},
      {"min_p", {s.min_p, kMinPBound}},
      {"repetition_penalty", {s.repetition_penalty, kRepetitionPenaltyBound}},
      {"presence_penalty", {s.presence_penalty, kPresencePenaltyBound}},
      {"frequency_penalty", {s.frequency_penalty, kFrequencyPenaltyBound}},
  };
  for (const auto& [name, value_bound] : bounded) {
    const auto& [value, bound] = value_bound;
    if (!bound.Contains(value)) return Bad(name, name, " must be in ", bound.Text(), ", got ", value);
  }
  if (s.top_k < 0) return Bad("top_k", "top_k must be >= 0 (0 = off), got ", s.top_k);
  if (s.penalty_last_n < 0)
    return Bad("penalty_last_n", "penalty_last_n must be >= 0 (0 = every token), got ", s.penalty_last_n);
  if (s.num_top_logprobs < 0 || s.num_top_logprobs > kMaxTopLogprobs) {
    return Bad("top_logprobs", "top logprobs must be in [0, ", kMaxTopLogprobs, "], got ",
               s.num_top_logprobs);
  }
  if (s.logit_bias.size() > kMaxLogitBiasEntries)
    return Bad("logit_bias", "logit_bias holds at most ", kMaxLogitBiasEntries, " entries, got ",
               s.logit_bias.size());
  for (const auto& [id, bias] : s.logit_bias) {
    if (id < 0 || id >= vocab_size) {
      return Bad("logit_bias", "logit_bias token id ", id, " is outside the vocabulary [0, ", vocab_size,
                 ")");
    }
    if (!kLogitBiasBound.Contains(bias))
      return Bad("logit_bias", "logit_bias for token ", id, " must be in ", kLogitBiasBound.Text(), ", got ",
                 bias);
  }
  for (int32_t id : r.stop_token_ids) {
    if (id < 0 || id >= vocab_size)
      return Bad("stop_token_ids", "stop token id ", id, " is outside the vocabulary [0, ", vocab_size, ")");
  }
  return absl::OkStatus();
}

// The prompt (after its prefix handle) and the length asked for: within the
// vocabulary, the context and the KV cache.
absl::Status ValidateLength(const EngineRequest& r, const RequestBounds& b) {
  const int64_t prefix_len = b.prefix_length;
  if (r.prompt.empty() && prefix_len == 0) return Bad("prompt", "prompt must hold at least one token");
  for (size_t i = 0; i < r.prompt.size(); ++i) {
    if (r.prompt[i] < 0 || r.prompt[i] >= b.vocab_size) {
      return Bad("prompt", "prompt token ", i, " has id ", r.prompt[i], ", outside the vocabulary [0, ",
                 b.vocab_size, ")");
    }
  }
  if (r.max_new_tokens < 0)
    return Bad("max_new_tokens", "max_new_tokens must be >= 0, got ", r.max_new_tokens);
  const int64_t total = prefix_len + static_cast<int64_t>(r.prompt.size()) + r.max_new_tokens;
  const int64_t prompt_len = prefix_len + static_cast<int64_t>(r.prompt.size());
  const std::string from_prefix = prefix_len > 0 ? absl::StrCat(" (", prefix_len, " from the prefix)") : "";
  if (r.max_new_tokens == 0 && total > b.context_length) {
    // Scoring and prefill generate nothing: only the prompt counts.
    return Bad("prompt", "prompt must hold at most ", b.context_length,
               " tokens (the context length); given ", prompt_len, from_prefix);
  }
  if (total > b.context_length) {
    return Bad("prompt", "prompt tokens + max_new_tokens must be <= ", b.context_length,
               " (the context length). Given: ", prefix_len + static_cast<int64_t>(r.prompt.size()),
               " prompt tokens", prefix_len > 0 ? absl::StrCat(" (", prefix_len, " from the prefix)") : "",
               " and ", r.max_new_tokens, " max_new_tokens");
  }
  const int64_t capacity = static_cast<int64_t>(b.num_blocks) * b.block_size;
  if (r.max_new_tokens == 0 && total > capacity) {
    return Bad("prompt", "prompt must hold at most ", capacity,
               " tokens (the KV cache capacity: ", b.num_blocks, " blocks of ", b.block_size, "); given ",
               prompt_len, from_prefix);
  }
  if (total > capacity) {
    return Bad("prompt", "prompt tokens + max_new_tokens must be <= ", capacity,
               " (the KV cache capacity). Given: ", r.prompt.size(), " prompt tokens and ", r.max_new_tokens,
               " max_new_tokens");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateRequest(const EngineRequest& r, const RequestBounds& bounds) {
  SHARDLM_RETURN_IF_ERROR(ValidateLength(r, bounds));
  return ValidateSampling(r, bounds.vocab_size);
}

}  // namespace shardlm
