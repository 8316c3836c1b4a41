// OpenAI's stateful APIs on the coordinator (docs/stateful_apis.md): the
// Assistants API's assistants, threads, messages, runs and run steps, kept in the state store
// (state/store.h), served on the OpenAI HTTP port beside chat and completions.
//
// A sibling front end over the serving core: it admits keys as the others do
// (ServingCore::AdmitKey), and every object belongs to the key that made it
// (its SHA-256, never the key itself, is stored): another key gets 404.
//
//   SHARDLM_ASSIGN_OR_RETURN(auto api, StatefulApi::Start(&core, store.get(), options));
//   OpenAiHttpOptions ho;  ho.extra_routes = api->Routes();
//   ... api->Stop(); http.reset();  // then api, then the store, go
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/http/http_server.h"
#include "coordinator/serving/serving_core.h"
#include "coordinator/stateful/background_responses.h"
#include "coordinator/stateful/response_execution.h"
#include "coordinator/stateful/run_executor.h"
#include "coordinator/stateful/stateful_routes.h"
#include "state/store.h"

namespace shardlm {

struct StatefulOptions {
  std::vector<std::string> model_names;  // what an assistant's "model" may name; the first is reported
  openai::ModelContext model;            // the tokenizer and chat template runs render threads with
  int run_threads = 16;                  // runs generating at once (--state-runs), and background responses
};

class StatefulApi {
 public:
  // `store` null: no state database (--state-db none); every route answers 404 saying so.
  // Otherwise the run executor starts (it reaps the runs of servers that stopped).
  static absl::StatusOr<std::unique_ptr<StatefulApi>> Start(ServingCore* core, StateStore* store,
                                                            StatefulOptions options);
  // Draining: queued runs stay queued for the next start; those generating may finish.
  void StartDraining();
  // Cancels the runs and background responses generating (before the HTTP server stops:
  // streamed runs hold its threads), and waits for their ends to be written.
  void Stop();

  // The routes under /v1/assistants and /v1/threads, for the OpenAI HTTP server.
  std::vector<HttpRoute> Routes();

 private:
  StatefulApi(ServingCore* core, StateStore* store, StatefulOptions options);
  void Handle(const HttpRequest& req, HttpExchange& exchange);
  // A run created with stream: true, executed on this request's thread, its events sent as they come.
  void StreamRun(const stateful::StatefulCall& call, HttpExchange& exchange);
  // The call's owner, path, query and body; or the reply refusing it.
  absl::StatusOr<stateful::StatefulCall> CallOf(const HttpRequest& req) const;

  stateful::ResponseContext ResponseContextOf() const;

  ServingCore* core_;
  openai::ModelContext model_;
  std::atomic<bool> stopping_{false};
  stateful::StatefulContext ctx_;
  // Each thread's, conversation's and stored response's KV between turns (runs and responses use it).
  std::unique_ptr<stateful::KvTurnCache> turns_;
  // Its jobs use the members above, and its destructor waits for them.
  std::unique_ptr<stateful::BackgroundResponses> background_;
  // Last (destroyed first): its heartbeat thread asks background_ which responses to stop.
  std::unique_ptr<stateful::RunExecutor> runs_;
};

// The hex SHA-256 of an API key: the owner column (the key itself is never stored).
std::string OwnerOfKey(const std::string& key);

}  // namespace shardlm
