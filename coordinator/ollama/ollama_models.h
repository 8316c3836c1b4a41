// Ollama's model endpoints (docs/ollama.md "Models"): /api/tags, /api/show,
// /api/ps and /api/version describe the one model served, from its card
// (formats/model_card.h). The digest (sha256 of the model's files) is computed
// once, on a thread of its own, from the start; the first listing waits up to
// 10 s for it, and until it is done every listing reports "" (a large model
// takes a while to hash).
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "coordinator/ollama/ollama_request.h"
#include "formats/model_card.h"

namespace shardlm {
namespace ollama {

// The Ollama API version whose shapes this front end follows (/api/version).
inline constexpr char kOllamaApiVersion[] = "0.33.0";

struct ModelDescription {
  ModelCard card;
  std::string path;                     // the --model given
  std::string template_source;          // the chat template's Jinja source ("" without one)
  std::vector<std::string> stop_texts;  // the model's end-of-turn tokens, as `stop` parameters
  bool tools = false;                   // the template takes tools
  bool insert = false;                  // the model has fill-in-the-middle tokens
  bool on_gpu = false;                  // its weights are on GPUs (size_vram)
  int64_t context_length = 0;
};

class ModelEndpoints {
 public:
  // Starts hashing the card's files.
  ModelEndpoints(ModelDescription description, std::vector<std::string> names);
  ~ModelEndpoints();  // stops the hashing and waits for its thread

  Json Tags();
  Json Ps();
  // /api/show for `body` ({model | name, verbose}); false with *error for an unknown model.
  bool Show(const Json& body, Json* out, OllamaError* error);
  Json Version() const { return Json{{"version", kOllamaApiVersion}}; }

 private:
  Json Details() const;
  Json Entry();          // a model as tags and ps list it
  std::string Digest();  // "" until computed (waiting up to 10 s)
  void Hash();           // the hashing thread
  std::string Parameters() const;
  std::string Modelfile() const;

  ModelDescription d_;
  std::vector<std::string> names_;
  std::mutex mu_;
  std::condition_variable hashed_;
  std::string digest_;   // guarded by mu_
  bool done_ = false;    // guarded by mu_
  bool waited_ = false;  // guarded by mu_: a listing has waited once
  std::atomic<bool> stop_{false};
  std::thread hasher_;
  Json model_info_;  // without arrays longer than 5 (Ollama's non-verbose show)
};

}  // namespace ollama
}  // namespace shardlm
