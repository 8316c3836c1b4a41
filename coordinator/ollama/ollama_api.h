// Ollama's API (docs/ollama.md) on the HTTP port the OpenAI API serves:
// /api/generate and /api/chat run on the serving core like every front end's
// calls (scheduler, prefix cache, API keys, draining, request ids, logs,
// metrics); /api/tags, /api/show, /api/ps and /api/version describe the model;
// the model management endpoints are refused.
//
//   std::unique_ptr<OllamaApi> ollama = OllamaApi::Start(&core, std::move(options));
//   OpenAiHttpOptions ho;
//   ho.extra_routes = ollama->Routes();
//   ...
//   ollama->Stop();  // before the HTTP server goes: requests still running are cancelled
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/http/http_server.h"
#include "coordinator/ollama/ollama_models.h"
#include "coordinator/ollama/ollama_request.h"
#include "coordinator/serving/serving_core.h"

namespace shardlm {

struct OllamaOptions {
  openai::ModelContext model;  // with the model's FIM tokens
  ollama::ModelDescription description;
};

class OllamaApi {
 public:
  static std::unique_ptr<OllamaApi> Start(ServingCore* core, OllamaOptions options);
  // Routes for the HTTP server; this object must outlive it.
  std::vector<HttpRoute> Routes();
  // Requests still running are cancelled (the server is shutting down).
  void Stop() { stopping_ = true; }

 private:
  OllamaApi(ServingCore* core, OllamaOptions options);
  void Generate(ollama::OllamaEndpoint endpoint, const HttpRequest& req, HttpExchange& exchange);
  void Run(const ollama::OllamaRequest& request, const std::string& owner, CallRecord& call,
           std::chrono::steady_clock::time_point received, const HttpHeaders& headers,
           HttpExchange& exchange);
  // The caller's key in *owner, or the error to send.
  std::optional<HttpReply> Admit(const HttpRequest& req, std::string* owner) const;
  void Show(const HttpRequest& req, HttpExchange& exchange);

  ServingCore* core_;
  openai::ModelContext model_;
  ollama::ModelEndpoints models_;
  std::atomic<bool> stopping_{false};
};

}  // namespace shardlm
