#include "coordinator/openai/openai_http.h"

#include <atomic>
#include <ctime>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "coordinator/http/metrics_http.h"
#include "coordinator/openai_wire/http_replies.h"
#include "coordinator/serving/generate_stream.h"

namespace shardlm {
namespace {

using openai::ApiError;
using openai::Json;

using openai::ErrorReply;
using openai::JsonReply;

// Errors the HTTP server answers itself (no route, a malformed or oversized
// request, one that did not arrive in time), in OpenAI's shape.
HttpReply ServerError(int status, const std::string& message) {
  switch (status) {
    case 404:
      return ErrorReply(ApiError{404, message, "not_found_error", "", ""});
    case 500:
      return ErrorReply(ApiError{500, message, "server_error", "", ""});
    case 503:
      return ErrorReply(ApiError{503, message, "service_unavailable_error", "", ""});
    default:
      return ErrorReply(ApiError{status, message, "invalid_request_error", "", ""});
  }
}

Json ModelObject(const std::string& name, int64_t max_context) {
  return Json{{"id", name},
              {"object", "model"},
              {"created", 0},
              {"owned_by", "shardlm"},
              {"max_model_len", max_context}};
}

int64_t UnixNow() { return static_cast<int64_t>(std::time(nullptr)); }

// Runs every prompt of `r` on the serving core (concurrently when there are
// several); the first failure cancels the others.
absl::Status RunPrompts(ServingCore* core, const openai::OpenAiRequest& r, const std::string& owner,
                        CallRecord& call, openai::ResponseWriter& out, const std::function<bool()>& gone) {
  std::atomic<bool> abort{false};
  std::vector<absl::Status> status(r.prompts.size());
  auto run = [&](size_t i) {
    status[i] = StreamGenerate(
        *core, r.prompts[i], owner, call,
        [&](const GenerateUpdate& update) {
          if (!out.Add(static_cast<int>(i), update)) abort = true;
          return !abort.load();
        },
        [&] { return abort.load() || gone(); });
    if (!status[i].ok()) abort = true;
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < r.prompts.size(); ++i) {
    try {
      threads.emplace_back(run, i);
    } catch (const std::system_error& e) {  // out of threads: fail the call, not the process
      abort = true;
      for (size_t j = i; j < r.prompts.size(); ++j) {
        status[j] = absl::ResourceExhaustedError(
            absl::StrCat("cannot start a thread for prompt ", j, ": ", e.what()));
      }
      break;
    }
  }
  run(0);
  for (std::thread& t : threads) t.join();
  call.SetTokens(out.prompt_tokens(), out.cached_tokens(), out.completion_tokens());
  for (const absl::Status& st : status) {
    if (!st.ok() && !absl::IsCancelled(st)) return st;
  }
  for (const absl::Status& st : status) {
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<OpenAiHttpServer>> OpenAiHttpServer::Start(ServingCore* core,
                                                                          OpenAiHttpOptions options) {
  std::unique_ptr<OpenAiHttpServer> s(new OpenAiHttpServer());
  s->core_ = core;
  s->options_ = std::move(options);
  HttpServerOptions ho;
  ho.host = s->options_.host;
  ho.port = s->options_.port;
  ho.flag = "--http-port";
  ho.tls = s->options_.tls;
  ho.threads = s->options_.threads;
  ho.max_body_bytes = s->options_.max_body_bytes;
  ho.request_timeout = s->options_.request_timeout;
  ho.max_idle_connections = s->options_.max_idle_connections;
  ho.error_reply = ServerError;
  auto server = HttpServer::Start(std::move(ho), s->Routes());
  if (!server.ok()) return server.status();
  s->server_ = std::move(*server);
  return s;
}

OpenAiHttpServer::~OpenAiHttpServer() {
  stopping_ = true;  // requests still running are cancelled; the server waits for them
  server_.reset();
}

std::vector<HttpRoute> OpenAiHttpServer::Routes() {
  std::vector<HttpRoute> routes;
  routes.push_back(HttpRoute::Quick("GET", "/health", [this](const HttpRequest&) { return Health(); }));
  if (options_.metrics) routes.push_back(MetricsRoute(options_.metrics));
  routes.push_back(HttpRoute::Quick("GET", "/v1/models", [this](const HttpRequest& r) { return Models(r); }));
  routes.push_back(
      HttpRoute::Quick("GET", "/v1/models/*", [this](const HttpRequest& r) { return Models(r); }));
  routes.push_back(HttpRoute::Slow("POST", "/v1/completions", [this](const HttpRequest& r, HttpExchange& x) {
    Generate(openai::Endpoint::kCompletions, r, x);
  }));
  routes.push_back(HttpRoute::Slow(
      "POST", "/v1/chat/completions",
      [this](const HttpRequest& r, HttpExchange& x) { Generate(openai::Endpoint::kChat, r, x); }));
  for (HttpRoute& route : options_.extra_routes) routes.push_back(std::move(route));
  options_.extra_routes.clear();
  return routes;
}

HttpReply OpenAiHttpServer::Health() const {
  const bool ok = !options_.ready || options_.ready();
  HttpReply r;
  r.status = ok ? 200 : 503;
  r.body = ok ? "{\"status\":\"ok\"}" : "{\"status\":\"unavailable\"}";
  return r;
}

std::optional<HttpReply> OpenAiHttpServer::Admit(const HttpRequest& req, std::string* owner) const {
  const std::string* key = req.Header("Authorization");
  absl::Status st = core_->AdmitKey(key, "header", owner);
  if (st.ok()) return std::nullopt;
  return ErrorReply(openai::FromStatus(st));
}

// GET /v1/models and /v1/models/{name}.
HttpReply OpenAiHttpServer::Models(const HttpRequest& req) const {
  std::string owner;
  if (auto refused = Admit(req, &owner)) return *refused;
  const int64_t max_context = options_.model.max_context;
  constexpr absl::string_view kList = "/v1/models";
  if (req.path == kList) {
    Json data = Json::array();
    for (const std::string& name : options_.model.names) data.push_back(ModelObject(name, max_context));
    return JsonReply(Json{{"object", "list"}, {"data", data}});
  }
  const std::string name = req.path.substr(kList.size() + 1);
  for (const std::string& n : options_.model.names) {
    if (n == name) return JsonReply(ModelObject(n, max_context));
  }
  return ErrorReply(ApiError{404, absl::StrCat("The model '", name, "' does not exist"), "not_found_error",
                             "model", "model_not_found"});
}

absl::Status OpenAiHttpServer::Run(const openai::OpenAiRequest& request, const std::string& owner,
                                   CallRecord& call, openai::ResponseWriter& out,
                                   const HttpExchange& exchange) {
  absl::Status st = RunPrompts(core_, request, owner, call, out,
                               [this, &exchange] { return stopping_.load() || exchange.ClientGone(); });
  // Cancelled by the server's shutdown, not by the client, which is still there to be told.
  if (absl::IsCancelled(st) && stopping_.load()) st = absl::UnavailableError("server is shutting down");
  return st;
}

// POST /v1/completions and /v1/chat/completions, on a request thread.
namespace {

// The body parsed into `request`, or the ApiError to send: JSON that does not
// parse is named by byte offset only (the parser's own message quotes the
// body, a prompt fragment that must not reach the log).
std::optional<ApiError> ParseBody(openai::Endpoint endpoint, const std::string& body,
                                  const openai::ModelContext& model, openai::OpenAiRequest* request,
                                  const Tokenizer::StopCheck& stop) {
  ApiError error;
  try {
    if (openai::ParseRequest(endpoint, openai::ParseJson(body), model, request, &error, stop))
      return std::nullopt;
    return error;
  } catch (const Json::parse_error& ex) {
    return ApiError{400, absl::StrCat("the request body is not valid JSON: a syntax error at byte ", ex.byte),
                    "invalid_request_error", "", ""};
  } catch (const Json::exception& ex) {
    return ApiError{400, absl::StrCat("the request body is not valid JSON (error ", ex.id, ")"),
                    "invalid_request_error", "", ""};
  } catch (const std::invalid_argument& ex) {
    return ApiError{400, absl::StrCat("the request body is not accepted: ", ex.what()),
                    "invalid_request_error", "", ""};
  } catch (const std::exception& ex) {
    return ApiError{500, ex.what(), "server_error", "", ""};
  }
}

}  // namespace

// The whole reply as one JSON body.
void OpenAiHttpServer::ReplyWhole(const openai::OpenAiRequest& request, const std::string& owner,
                                  CallRecord& call, const ReplyIds& ids, HttpExchange& exchange) {
  std::string body;
  openai::ResponseWriter out(request, options_.model.tokenizer, ids.id, ids.created,
                             [&](const std::string& s) {
                               body = s;
                               return true;
                             });
  absl::Status st = Run(request, owner, call, out, exchange);
  call.Finish(st).IgnoreError();  // logged and counted; the reply carries the status
  HttpReply r;
  if (st.ok()) {
    out.Finish();
    r.body = std::move(body);
  } else {
    r = ErrorReply(openai::FromStatus(st, request.constraint_param));
  }
  r.headers = ids.headers;
  exchange.Send(r);
}

// The reply as server-sent events, one per token batch; an error after the
// stream began is its last event.
void OpenAiHttpServer::ReplyStream(const openai::OpenAiRequest& request, const std::string& owner,
                                   CallRecord& call, const ReplyIds& ids, HttpExchange& exchange) {
  HttpHeaders headers = ids.headers;
  headers.emplace_back("Cache-Control", "no-cache");
  if (!exchange.BeginStream(200, "text/event-stream", headers)) {
    call.Finish(absl::CancelledError("client went away")).IgnoreError();
    return;
  }
  openai::ResponseWriter out(request, options_.model.tokenizer, ids.id, ids.created,
                             [&exchange](const std::string& s) { return exchange.Write(s); });
  absl::Status st = Run(request, owner, call, out, exchange);
  call.Finish(st).IgnoreError();
  if (st.ok()) {
    out.Finish();
  } else if (!absl::IsCancelled(st)) {
    out.Fail(openai::FromStatus(st, request.constraint_param));
  }
  exchange.EndStream();
}

void OpenAiHttpServer::Generate(openai::Endpoint endpoint, const HttpRequest& req, HttpExchange& exchange) {
  const bool chat = endpoint == openai::Endpoint::kChat;
  const std::string* request_id = req.Header("x-request-id");
  CallRecord call(request_id ? *request_id : "", chat ? "CreateChatCompletion" : "CreateCompletion",
                  core_->metrics());
  ReplyIds ids{
      absl::StrCat(chat ? "chatcmpl-" : "cmpl-", call.id()), UnixNow(), {{"x-request-id", call.id()}}};
  std::string owner;
  if (auto refused = Admit(req, &owner)) {
    refused->headers = ids.headers;
    exchange.Send(*refused);
    call.Finish(absl::UnauthenticatedError("rejected")).IgnoreError();
    return;
  }
  call.SetAbandonedCheck([&exchange] { return exchange.ClientGone(); });
  openai::OpenAiRequest request;
  // Tokenizing a long prompt stops when the client leaves or the server stops.
  if (auto error = ParseBody(endpoint, req.body, options_.model, &request,
                             [this, &call] { return stopping_.load() || call.Abandoned(); })) {
    HttpReply r = ErrorReply(*error);
    r.headers = ids.headers;
    exchange.Send(r);
    call.Finish(absl::Status(openai::StatusCodeForHttp(error->http_status), error->message)).IgnoreError();
    return;
  }
  if (request.stream) {
    ReplyStream(request, owner, call, ids, exchange);
  } else {
    ReplyWhole(request, owner, call, ids, exchange);
  }
}

}  // namespace shardlm
