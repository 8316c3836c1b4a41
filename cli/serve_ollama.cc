#include "cli/serve_ollama.h"

#include <cstdio>
#include <filesystem>

#include "common/status.h"
#include "formats/model_card.h"

namespace shardlm {

OllamaOptions OllamaOptionsOf(const std::string& model, const ModelConfig& cfg,
                              const openai::ModelContext& context, bool on_gpu) {
  OllamaOptions o;
  o.model = context;
  ollama::ModelDescription& d = o.description;
  if (absl::StatusOr<ModelCard> card = ReadModelCard(model); card.ok()) {
    d.card = std::move(*card);
  } else {
    std::fprintf(stderr, "shardlm: the Ollama API's model card: %s\n",
                 std::string(card.status().message()).c_str());
  }
  d.path = std::filesystem::absolute(model).lexically_normal().string();
  if (context.chat_template != nullptr) {
    d.template_source = context.chat_template->sources();
    d.tools = d.template_source.find("tools") != std::string::npos;
  }
  if (context.tokenizer != nullptr) {
    for (int64_t id : cfg.eos_token_ids) {
      const std::string& text =
          context.tokenizer->TokenBytes(static_cast<int32_t>(id), /*skip_special=*/false);
      if (!text.empty()) d.stop_texts.push_back(text);
    }
  }
  d.insert = context.fim != nullptr;
  d.on_gpu = on_gpu;
  d.context_length = context.max_context;
  return o;
}

}  // namespace shardlm
