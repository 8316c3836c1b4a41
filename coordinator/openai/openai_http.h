// The OpenAI-compatible HTTP front end (docs/openai.md), on the coordinator.
//
// POST /v1/completions and /v1/chat/completions (stream: server-sent events),
// GET /v1/models, GET /health. Requests are translated (openai_api.h) and run
// on the serving core (coordinator/serving/), as gRPC's are, so they share its
// scheduler, prefix cache, API keys, draining, request ids, logs and metrics. A client
// that disconnects, streaming or not, has its request cancelled within one
// step and its KV blocks freed.
//
// HttpServer (http_server.h) does the HTTP: health and model lists answer on
// its I/O thread, each generation holds one of `threads` request threads
// while it runs.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tls_files.h"
#include "coordinator/http/http_server.h"
#include "coordinator/openai/openai_api.h"
#include "coordinator/serving/serving_core.h"

namespace shardlm {

struct OpenAiHttpOptions {
  std::string host = "127.0.0.1";
  int port = 0;      // 0: any free port
  TlsFiles tls;      // certificate and key: HTTPS (with client_ca: clients must present a certificate)
  int threads = 64;  // concurrent generation requests
  size_t max_body_bytes = 16 << 20;
  std::chrono::milliseconds request_timeout{30000};  // to receive a whole request
  int max_idle_connections = 256;                    // kept-alive connections between requests
  openai::ModelContext model;
  std::function<bool()> ready;  // GET /health: 200 when true, else 503
  // GET /metrics as on the metrics port (vLLM serves it on its API port, where the Gateway API
  // Inference Extension's endpoint picker looks by default); none when unset.
  std::function<std::string()> metrics;
  // Routes of another front end on the same port (coordinator/stateful/'s), after these.
  std::vector<HttpRoute> extra_routes;
};

class OpenAiHttpServer {
 public:
  static absl::StatusOr<std::unique_ptr<OpenAiHttpServer>> Start(ServingCore* core,
                                                                 OpenAiHttpOptions options);
  ~OpenAiHttpServer();
  int port() const { return server_->port(); }

 private:
  OpenAiHttpServer() = default;
  std::vector<HttpRoute> Routes();
  HttpReply Health() const;
  HttpReply Models(const HttpRequest& req) const;
  void Generate(openai::Endpoint endpoint, const HttpRequest& req, HttpExchange& exchange);
  // The caller's key (empty without keys) in *owner, or the error to send.
  std::optional<HttpReply> Admit(const HttpRequest& req, std::string* owner) const;
  // Runs a request's prompts; cancelled when the client goes (CANCELLED) or
  // the server stops (UNAVAILABLE).
  absl::Status Run(const openai::OpenAiRequest& request, const std::string& owner, CallRecord& call,
                   openai::ResponseWriter& out, const HttpExchange& exchange);
  // A reply's id ("chatcmpl-..."), creation time and headers (x-request-id).
  struct ReplyIds {
    std::string id;
    int64_t created = 0;
    HttpHeaders headers;
  };
  void ReplyWhole(const openai::OpenAiRequest& request, const std::string& owner, CallRecord& call,
                  const ReplyIds& ids, HttpExchange& exchange);
  void ReplyStream(const openai::OpenAiRequest& request, const std::string& owner, CallRecord& call,
                   const ReplyIds& ids, HttpExchange& exchange);

  ServingCore* core_ = nullptr;
  OpenAiHttpOptions options_;
  std::unique_ptr<HttpServer> server_;
  std::atomic<bool> stopping_{false};  // requests still running are cancelled
};

}  // namespace shardlm
