// serve's Ollama front end (docs/ollama.md): what it says about the model
// served, read from the model's files at start.
#pragma once

#include <string>

#include "chat/chat_template.h"
#include "coordinator/ollama/ollama_api.h"
#include "formats/model_config.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {

// `model` is the --model given; `context` the OpenAI front ends' view of it
// (with the FIM tokens); `on_gpu` whether its workers run on GPUs. A model card
// that cannot be read is a warning: the listings then say less.
OllamaOptions OllamaOptionsOf(const std::string& model, const ModelConfig& cfg,
                              const openai::ModelContext& context, bool on_gpu);

}  // namespace shardlm
