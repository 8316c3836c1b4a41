// What a model is, as catalogues describe it (Ollama's /api/tags and /api/show,
// docs/ollama.md "Models"): its format, family, size in parameters and bytes,
// quantization, files, and metadata — read once at start from the GGUF file or
// the checkpoint directory given to --model.
//
//   SHARDLM_ASSIGN_OR_RETURN(ModelCard card, ReadModelCard("/models/SmolLM2-135M-Instruct.Q4_1.gguf"));
//   card.family == "llama"; ParameterSizeText(card.parameter_count) == "135M"; card.quantization == "Q4_1"
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace shardlm {

struct ModelCard {
  std::string format;              // "gguf" or "safetensors"
  std::string family;              // general.architecture, or config.json's model_type ("llama", "qwen2")
  int64_t parameter_count = 0;     // elements of every tensor
  std::string quantization;        // GGUF's general.file_type ("Q4_1", "Q4_K_M"), or the dtype ("BF16")
  std::vector<std::string> files;  // the files that make the model (weights, config, tokenizer)
  int64_t bytes = 0;               // their size
  int64_t modified_unix_s = 0;     // the newest one's modification time
  // GGUF's metadata (every key, arrays whole), or a directory's config.json under GGUF's key
  // names (general.architecture, <arch>.context_length, <arch>.block_count, ...).
  nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
  std::string license;  // general.license, when the file names one
};

absl::StatusOr<ModelCard> ReadModelCard(const std::string& model);

// "135M", "1.5B", "8.0B": as Ollama writes parameter_size.
std::string ParameterSizeText(int64_t parameters);

}  // namespace shardlm
