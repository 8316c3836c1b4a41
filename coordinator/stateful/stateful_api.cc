#include "coordinator/stateful/stateful_api.h"

#include <openssl/evp.h>

#include <exception>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status.h"
#include "coordinator/openai_wire/http_replies.h"
#include "coordinator/stateful/objects.h"
#include "coordinator/stateful/response_execution.h"
#include "coordinator/stateful/stateful_params.h"

namespace shardlm {

using stateful::Json;
using stateful::StatefulCall;

namespace stateful {

absl::Status InvalidUrl(const StatefulCall& call) {
  std::string path = "/v1";
  for (const std::string& s : call.path) absl::StrAppend(&path, "/", s);
  return absl::NotFoundError(absl::StrCat("Invalid URL (", call.method, " ", path.substr(0, 200), ")"));
}

}  // namespace stateful

std::string OwnerOfKey(const std::string& key) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(key.data(), key.size(), digest, &size, EVP_sha256(), nullptr);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < size; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

StatefulApi::StatefulApi(ServingCore* core, StateStore* store, StatefulOptions options) : core_(core) {
  ctx_.store = store;
  ctx_.model_names = std::move(options.model_names);
  model_ = options.model;
  turns_ = std::make_unique<stateful::KvTurnCache>(core->loop());
  ctx_.turns = turns_.get();
  background_ = std::make_unique<stateful::BackgroundResponses>(options.run_threads);
  ctx_.background = background_.get();
  if (store != nullptr) {
    // A background response generating here that a cancel through another serve ended stops too.
    auto stop_cancelled = [store, background = background_.get()] {
      std::vector<std::string> running = background->Running();
      absl::StatusOr<std::vector<std::string>> cancelled = store->CancelledResponses(running);
      if (!cancelled.ok()) return;
      for (const std::string& id : *cancelled) background->Cancel(id, std::chrono::milliseconds(0));
    };
    runs_ = std::make_unique<stateful::RunExecutor>(
        core, store,
        stateful::RunExecutorOptions{options.run_threads, options.model, stop_cancelled, turns_.get()});
    ctx_.runs = runs_.get();
  }
}

absl::StatusOr<std::unique_ptr<StatefulApi>> StatefulApi::Start(ServingCore* core, StateStore* store,
                                                                StatefulOptions options) {
  std::unique_ptr<StatefulApi> api(new StatefulApi(core, store, std::move(options)));
  if (api->runs_ != nullptr) SHARDLM_RETURN_IF_ERROR(api->runs_->Start());
  return api;
}

void StatefulApi::StartDraining() {
  if (runs_ != nullptr) runs_->StopClaiming();
}

void StatefulApi::Stop() {
  stopping_ = true;
  if (runs_ != nullptr) runs_->Stop();
  background_->Stop();  // each writes its end (failed: "server shutting down")
}

stateful::ResponseContext StatefulApi::ResponseContextOf() const {
  stateful::ResponseContext r;
  r.core = core_;
  r.store = ctx_.store;
  r.model = &model_;
  r.runner = runs_ != nullptr ? runs_->instance() : "";
  r.stopping = &stopping_;
  r.background = background_.get();
  r.turns = turns_.get();
  return r;
}

namespace {

// Server-sent events of a streamed run: "event: NAME\ndata: JSON\n\n". A client that leaves
// does not stop the run (it is a stored object, as on OpenAI): later writes are skipped.
class SseRunEvents : public stateful::RunEventSink {
 public:
  explicit SseRunEvents(HttpExchange& exchange) : exchange_(exchange) {}
  void Send(const std::string& event, const Json& data) override {
    Write(absl::StrCat("event: ", event,
                       "\ndata: ", data.dump(-1, ' ', false, Json::error_handler_t::replace), "\n\n"));
  }
  void Write(const std::string& text) {
    if (open_) open_ = exchange_.Write(text);
  }

 private:
  HttpExchange& exchange_;
  bool open_ = true;
};

}  // namespace

void StatefulApi::StreamRun(const StatefulCall& call, HttpExchange& exchange) {
  absl::StatusOr<stateful::QueuedRun> queued = stateful::CreateRunFrom(ctx_, call);
  if (!queued.ok()) {
    exchange.Send(openai::ErrorReply(stateful::ErrorOf(queued.status())));
    return;
  }
  const RunRow* run = &queued->run;
  SseRunEvents events(exchange);
  if (exchange.BeginStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) {
    if (call.path.size() == 2) {  // create-and-run: the thread first
      absl::StatusOr<ThreadRow> thread = ctx_.store->GetThread(call.owner, run->thread_id);
      if (thread.ok()) events.Send("thread.created", stateful::ThreadObject(*thread));
    }
    if (queued->completed_step) {  // submit_tool_outputs: the tool step, its outputs filled
      events.Send("thread.run.step.completed", stateful::RunStepObject(*queued->completed_step));
    } else {
      events.Send("thread.run.created", stateful::RunObject(*run));
    }
    events.Send("thread.run.queued", stateful::RunObject(*run));
  }
  if (!runs_->Execute(*run, &events)) {
    // It did not run here (cancelled while queued): its end as stored.
    absl::StatusOr<RunRow> now = ctx_.store->GetRun(call.owner, run->thread_id, run->id);
    if (now.ok()) events.Send("thread.run." + now->status, stateful::RunObject(*now));
  }
  events.Write("event: done\ndata: [DONE]\n\n");
  exchange.EndStream();
}

std::vector<HttpRoute> StatefulApi::Routes() {
  std::vector<HttpRoute> routes;
  for (const char* prefix :
       {"/v1/assistants", "/v1/assistants/*", "/v1/threads", "/v1/threads/*", "/v1/responses",
        "/v1/responses/*", "/v1/conversations", "/v1/conversations/*"}) {
    for (const char* method : {"GET", "POST", "DELETE"}) {
      routes.push_back(
          HttpRoute::Slow(method, prefix, [this](const HttpRequest& r, HttpExchange& x) { Handle(r, x); }));
    }
  }
  return routes;
}

absl::StatusOr<StatefulCall> StatefulApi::CallOf(const HttpRequest& req) const {
  StatefulCall call;
  std::string key;
  SHARDLM_RETURN_IF_ERROR(core_->AdmitKey(req.Header("Authorization"), "header", &key));
  call.owner = key.empty() ? "" : OwnerOfKey(key);
  call.method = req.method;
  // "/v1/threads/thread_x/messages" -> {"threads", "thread_x", "messages"}
  call.path = absl::StrSplit(absl::string_view(req.path).substr(4), '/');
  for (const std::string& segment : call.path) {
    if (segment.empty()) return stateful::InvalidUrl(call);
  }
  SHARDLM_ASSIGN_OR_RETURN(call.query, stateful::ParseQuery(req.query));
  if (req.method == "POST" && !req.body.empty()) {
    try {
      call.body = openai::ParseJson(req.body);
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat("the request body is not valid JSON: ", e.what()));
    }
    if (!call.body.is_object()) return absl::InvalidArgumentError("the request body must be a JSON object");
  }
  call.now_s = absl::ToUnixSeconds(absl::Now());
  return call;
}

void StatefulApi::Handle(const HttpRequest& req, HttpExchange& exchange) {
  absl::StatusOr<Json> reply = [&]() -> absl::StatusOr<Json> {
    SHARDLM_ASSIGN_OR_RETURN(StatefulCall call, CallOf(req));
    if (call.path[0] == "responses" && call.path.size() == 1 && call.method == "POST") {
      stateful::CreateResponse(ResponseContextOf(), call, req, exchange);
      return Json();  // answered
    }
    if (ctx_.store == nullptr) {
      return absl::NotFoundError(
          "the Assistants API needs a state database (--state-db; this server runs with none)");
    }
    if (stateful::CreatesRun(call) && call.body.contains("stream") && call.body["stream"] == true) {
      StreamRun(call, exchange);
      return Json();  // answered
    }
    if (call.path[0] == "assistants") return stateful::AssistantsRoute(ctx_, call);
    if (call.path[0] == "conversations") return stateful::ConversationsRoute(ctx_, call);
    if (call.path[0] == "responses") return stateful::ResponsesRoute(ctx_, call);
    if (call.path[0] == "threads") return stateful::ThreadsRoute(ctx_, call);
    return stateful::InvalidUrl(call);
  }();
  if (reply.ok() && reply->is_null()) return;  // streamed
  exchange.Send(reply.ok() ? openai::JsonReply(*reply)
                           : openai::ErrorReply(stateful::ErrorOf(reply.status())));
}

}  // namespace shardlm
