// Fill-in-the-middle prompts (docs/ollama.md "Fill-in-the-middle"): the code
// between a prefix and a suffix, as editors ask a coder model for it through
// /v1/completions `suffix` and Ollama's /api/generate `suffix`.
//
// A model takes part when its tokenizer holds one family's three FIM tokens as
// added (special) tokens; GGUF files carry them as control tokens, which the
// GGUF reader turns into added tokens too. The prompt is prefix-suffix-middle
// (PSM), as the models were trained and as llama.cpp's /infill builds it:
//
//   [bos] <|fim_prefix|> prefix <|fim_suffix|> suffix <|fim_middle|>   -> the middle, then an end token
//
//   std::optional<FimTokens> fim = FindFimTokens(tokenizer);
//   if (!fim) ... 400: this model has no fill-in-the-middle tokens
//   auto ids = FimPrompt(tokenizer, *fim, prefix, suffix, max_tokens, "prompt", "suffix", stop);
//   request.stop_token_ids.insert(..., fim->ends.begin(), fim->ends.end());
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {

struct FimTokens {
  std::string family;  // "qwen", "starcoder", "deepseek", "codellama"
  int32_t prefix = -1, suffix = -1, middle = -1;
  // Tokens that end a middle beside the model's EOS (<|fim_pad|>, <|file_sep|>, ...).
  std::vector<int32_t> ends;
  // The three tokens' texts, for messages.
  std::string names;
};

// The model's FIM tokens, or nullopt when its tokenizer has no family's full set.
std::optional<FimTokens> FindFimTokens(const Tokenizer& tokenizer);

// The prompt's ids: the tokenizer's BOS when it adds one, then prefix, suffix
// and middle in PSM order. `max_tokens` bounds the texts before they are
// tokenized (CheckTextFits); errors name `prefix_field` or `suffix_field`.
absl::StatusOr<std::vector<int32_t>> FimPrompt(const Tokenizer& tokenizer, const FimTokens& fim,
                                               const std::string& prefix, const std::string& suffix,
                                               int64_t max_tokens, const std::string& prefix_field,
                                               const std::string& suffix_field,
                                               const Tokenizer::StopCheck& stop);

}  // namespace shardlm
