// Where a model's parts are read from: a Hugging Face checkpoint directory
// (config.json, *.safetensors, tokenizer.json, tokenizer_config.json) or one
// GGUF file, which carries all of them in its metadata (formats/gguf_model.h).
// Every `--model` flag accepts either; these functions are the one place that
// tells them apart (LoadModelConfig and Checkpoint::Open do the same for the
// config and the weights).
//
//   SHARDLM_ASSIGN_OR_RETURN(std::string text, ReadTokenizerJson("/models/SmolLM2.Q4_1.gguf"));
//   SHARDLM_ASSIGN_OR_RETURN(auto tok, Tokenizer::FromJson(text, "SmolLM2.Q4_1.gguf"));
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace shardlm {

// The text of the model's tokenizer.json; NotFound when it has none.
absl::StatusOr<std::string> ReadTokenizerJson(const std::string& model);

// The text of the model's tokenizer_config.json (chat template, special tokens);
// NotFound when it has none.
absl::StatusOr<std::string> ReadTokenizerConfigJson(const std::string& model);

// The name a model is served under by default: the directory's name, or the
// GGUF file's name without ".gguf".
std::string ModelDisplayName(const std::string& model);

}  // namespace shardlm
