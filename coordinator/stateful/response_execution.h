// POST /v1/responses: one response generated on its request's thread
// (docs/stateful_apis.md sections 5 and 6). Its prompt is the instructions,
// the chain its previous_response_id ends (every input and output item, in one
// query), then its input. With store it is written in progress with its input,
// then ended with its output in one transaction; without, nothing is written.
// Streamed, it sends OpenAI's response.* events, each with its sequence_number.
// A client that leaves cancels it within one engine step. With background: true
// it is stored and answered in progress at once, and generates on a thread of
// ctx.background's (a cancel or a stopping server stops it).
#pragma once

#include <atomic>
#include <string>

#include "coordinator/http/http_server.h"
#include "coordinator/openai_wire/model_context.h"
#include "coordinator/serving/serving_core.h"
#include "coordinator/stateful/background_responses.h"
#include "coordinator/stateful/kv_turns.h"
#include "coordinator/stateful/stateful_routes.h"
#include "state/store.h"

namespace shardlm {
namespace stateful {

struct ResponseContext {
  ServingCore* core = nullptr;
  StateStore* store = nullptr;  // null: --state-db none (store: false only)
  const openai::ModelContext* model = nullptr;
  std::string runner;  // this serve's instance id in the store
  const std::atomic<bool>* stopping = nullptr;
  BackgroundResponses* background = nullptr;  // where background: true generates
  KvTurnCache* turns = nullptr;               // the KV of chains and conversations between turns
};

void CreateResponse(const ResponseContext& ctx, const StatefulCall& call, const HttpRequest& req,
                    HttpExchange& exchange);

}  // namespace stateful
}  // namespace shardlm
