// What a GGUF's tokenizer metadata maps to in tokenizer.json terms
// (formats/gguf_model.cc writes the rest): the pre-tokenizer of a byte-level
// BPE named by tokenizer.ggml.pre, and a SentencePiece vocabulary
// (tokenizer.ggml.model "llama") as the tokenizer.json that Hugging Face
// transformers builds from it for Gemma 3
// (docs/gemma3.md): a BPE with byte fallback, not byte-level; the vocabulary
// with runs of spaces spelled as U+2581; merges derived from the vocabulary
// (every split of a token into two tokens, ranked by the token's position in
// the file, the longer left part first); ' ' replaced by U+2581 before the
// model; control tokens special and user-defined ones plain added tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace shardlm {

// Fills (*root)'s normalizer, pre_tokenizer and model.ignore_merges for
// tokenizer.ggml.pre `pre` (gpt-2, smollm, llama-bpe, qwen2: the splits the
// Hugging Face tokenizer.json of the same model declares); InvalidArgument
// naming the file otherwise.
absl::Status GgufPreTokenizerInto(const std::string& pre, const std::string& label, nlohmann::json* root);

// tokenizer.json's entry for an added token matched whole in the raw text
// (special: a control token).
nlohmann::json AddedTokenJson(int64_t id, const std::string& content, bool special);

struct SentencePieceVocab {
  const std::vector<std::string>* tokens = nullptr;
  std::vector<int64_t> types;  // 1 normal, 2 unknown, 3 control, 4 user-defined, 6 byte
  int64_t unk = -1;
};

// Fills (*root)'s added tokens, normalizer, pre-tokenizer, model and decoder
// (formats/gguf_model.cc adds the post-processor); `label` names the file in errors.
absl::Status SentencePieceInto(const SentencePieceVocab& vocab, const std::string& label,
                               nlohmann::json* root);

}  // namespace shardlm
