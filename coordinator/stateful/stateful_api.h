// OpenAI's stateful APIs on the coordinator (docs/stateful_apis.md): the
// Assistants API's assistants, threads and messages, kept in the state store
// (state/store.h), served on the OpenAI HTTP port beside chat and completions.
//
// A sibling front end over the serving core: it admits keys as the others do
// (ServingCore::AdmitKey), and every object belongs to the key that made it
// (its SHA-256, never the key itself, is stored): another key gets 404.
//
//   StatefulApi api(&core, store.get(), {served model names});
//   OpenAiHttpOptions ho;  ho.extra_routes = api.Routes();
#pragma once

#include <string>
#include <vector>

#include "coordinator/http/http_server.h"
#include "coordinator/serving/serving_core.h"
#include "coordinator/stateful/stateful_routes.h"
#include "state/store.h"

namespace shardlm {

struct StatefulOptions {
  std::vector<std::string> model_names;  // what an assistant's "model" may name; the first is reported
};

class StatefulApi {
 public:
  // `store` null: no state database (--state-db none); every route answers 404 saying so.
  StatefulApi(ServingCore* core, StateStore* store, StatefulOptions options);

  // The routes under /v1/assistants and /v1/threads, for the OpenAI HTTP server.
  std::vector<HttpRoute> Routes();

 private:
  void Handle(const HttpRequest& req, HttpExchange& exchange);
  // The call's owner, path, query and body; or the reply refusing it.
  absl::StatusOr<stateful::StatefulCall> CallOf(const HttpRequest& req) const;

  ServingCore* core_;
  stateful::StatefulContext ctx_;
};

// The hex SHA-256 of an API key: the owner column (the key itself is never stored).
std::string OwnerOfKey(const std::string& key);

}  // namespace shardlm
