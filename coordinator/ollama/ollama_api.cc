#include "coordinator/ollama/ollama_api.h"

#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "coordinator/ollama/ollama_reply.h"
#include "coordinator/openai_wire/http_replies.h"
#include "coordinator/serving/generate_stream.h"

namespace shardlm {
namespace {

using ollama::Json;
using ollama::OllamaEndpoint;
using ollama::OllamaError;

using openai::JsonReply;

// {"error": message} with the error's status.
HttpReply ErrorReply(const OllamaError& e, const HttpHeaders& headers = {}) {
  HttpReply r = JsonReply(Json{{"error", e.message}});
  r.status = e.status;
  r.headers = headers;
  return r;
}

// The serving core's status in Ollama's terms, the engine's field names in Ollama's.
OllamaError ErrorOf(const absl::Status& st) {
  OllamaError e{500, absl::StrReplaceAll(st.message(), {{"max_new_tokens", "options.num_predict"},
                                                        {"constraint.json_schema", "format"},
                                                        {"constraint.json_object", "format"}})};
  switch (st.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      e.status = 400;
      break;
    case absl::StatusCode::kUnauthenticated:
      e.status = 401;
      break;
    case absl::StatusCode::kNotFound:
      e.status = 404;
      break;
    case absl::StatusCode::kResourceExhausted:  // the queue is full: Ollama's "server busy"
    case absl::StatusCode::kUnavailable:
      e.status = 503;
      break;
    case absl::StatusCode::kCancelled:
      e.status = 499;
      break;
    default:
      break;
  }
  return e;
}

// The body as JSON, or the error to send (a parse error named by byte offset only: the
// parser's message would quote the body).
std::optional<OllamaError> ParseBody(const std::string& body, Json* out) {
  if (body.empty()) return OllamaError{400, "missing request body"};
  try {
    *out = openai::ParseJson(body);
    return std::nullopt;
  } catch (const Json::parse_error& ex) {
    return OllamaError{400,
                       absl::StrCat("the request body is not valid JSON: a syntax error at byte ", ex.byte)};
  } catch (const Json::exception& ex) {
    return OllamaError{400, absl::StrCat("the request body is not valid JSON (error ", ex.id, ")")};
  } catch (const std::invalid_argument& ex) {
    return OllamaError{400, absl::StrCat("the request body is not accepted: ", ex.what())};
  }
}

}  // namespace

OllamaApi::OllamaApi(ServingCore* core, OllamaOptions options)
    : core_(core), model_(options.model), models_(std::move(options.description), options.model.names) {}

std::unique_ptr<OllamaApi> OllamaApi::Start(ServingCore* core, OllamaOptions options) {
  return std::unique_ptr<OllamaApi>(new OllamaApi(core, std::move(options)));
}

std::vector<HttpRoute> OllamaApi::Routes() {
  std::vector<HttpRoute> routes;
  routes.push_back(HttpRoute::Quick("GET", "/", [](const HttpRequest&) {
    return HttpReply{
        200, "text/plain", "shardlm is running (Ollama's API under /api, OpenAI's under /v1)", {}};
  }));
  routes.push_back(HttpRoute::Slow("POST", "/api/generate", [this](const HttpRequest& r, HttpExchange& x) {
    Generate(OllamaEndpoint::kGenerate, r, x);
  }));
  routes.push_back(HttpRoute::Slow("POST", "/api/chat", [this](const HttpRequest& r, HttpExchange& x) {
    Generate(OllamaEndpoint::kChat, r, x);
  }));
  routes.push_back(HttpRoute::Quick("GET", "/api/version",
                                    [this](const HttpRequest&) { return JsonReply(models_.Version()); }));
  // The listings wait (on a request thread) for the digest computed at start.
  for (const auto& [path, list] : {std::pair<const char*, bool>{"/api/tags", true}, {"/api/ps", false}}) {
    routes.push_back(HttpRoute::Slow("GET", path, [this, list = list](const HttpRequest& r, HttpExchange& x) {
      std::string owner;
      if (auto refused = Admit(r, &owner)) return static_cast<void>(x.Send(*refused));
      x.Send(JsonReply(list ? models_.Tags() : models_.Ps()));
    }));
  }
  routes.push_back(
      HttpRoute::Slow("POST", "/api/show", [this](const HttpRequest& r, HttpExchange& x) { Show(r, x); }));
  for (const auto& [method, path] :
       std::vector<std::pair<const char*, const char*>>{{"POST", "/api/pull"},
                                                        {"POST", "/api/push"},
                                                        {"POST", "/api/create"},
                                                        {"POST", "/api/copy"},
                                                        {"DELETE", "/api/delete"},
                                                        {"POST", "/api/blobs/*"},
                                                        {"GET", "/api/blobs/*"}}) {
    routes.push_back(HttpRoute::Quick(method, path, [path = std::string(path)](const HttpRequest&) {
      return ErrorReply({403, absl::StrCat(path,
                                           ": shardlm serves the model files given at start (--model); "
                                           "models cannot be pulled, pushed, created, copied or deleted")});
    }));
  }
  for (const char* method : {"GET", "POST", "DELETE"}) {
    routes.push_back(HttpRoute::Quick(method, "/api/*", [](const HttpRequest& r) {
      return ErrorReply({404, absl::StrCat(r.path, " is not an endpoint of Ollama's API here")});
    }));
  }
  return routes;
}

std::optional<HttpReply> OllamaApi::Admit(const HttpRequest& req, std::string* owner) const {
  absl::Status st = core_->AdmitKey(req.Header("Authorization"), "header", owner);
  if (st.ok()) return std::nullopt;
  return ErrorReply(ErrorOf(st));
}

void OllamaApi::Show(const HttpRequest& req, HttpExchange& exchange) {
  std::string owner;
  if (auto refused = Admit(req, &owner)) return static_cast<void>(exchange.Send(*refused));
  Json body, out;
  OllamaError error;
  if (auto bad = ParseBody(req.body, &body)) return static_cast<void>(exchange.Send(ErrorReply(*bad)));
  if (!models_.Show(body, &out, &error)) return static_cast<void>(exchange.Send(ErrorReply(error)));
  exchange.Send(JsonReply(out));
}

void OllamaApi::Generate(OllamaEndpoint endpoint, const HttpRequest& req, HttpExchange& exchange) {
  const auto received = std::chrono::steady_clock::now();
  const bool chat = endpoint == OllamaEndpoint::kChat;
  const std::string* request_id = req.Header("x-request-id");
  CallRecord call(request_id ? *request_id : "", chat ? "OllamaChat" : "OllamaGenerate", core_->metrics());
  const HttpHeaders headers = {{"x-request-id", call.id()}};
  std::string owner;
  if (auto refused = Admit(req, &owner)) {
    refused->headers = headers;
    exchange.Send(*refused);
    call.Finish(absl::UnauthenticatedError("rejected")).IgnoreError();
    return;
  }
  call.SetAbandonedCheck([&exchange] { return exchange.ClientGone(); });
  Json body;
  ollama::OllamaRequest request;
  std::optional<OllamaError> error = ParseBody(req.body, &body);
  if (!error) {
    OllamaError e;
    if (!ollama::ParseOllamaRequest(endpoint, body, model_, &request, &e,
                                    [this, &call] { return stopping_.load() || call.Abandoned(); })) {
      error = e;
    }
  }
  if (error) {
    exchange.Send(ErrorReply(*error, headers));
    call.Finish(absl::Status(openai::StatusCodeForHttp(error->status), error->message)).IgnoreError();
    return;
  }
  Run(request, owner, call, received, headers, exchange);
}

// Runs the request, answering as it asked: NDJSON lines or one object. The stream begins
// with its first line, so that an error found before (a bad schema, a full queue) is an HTTP
// error with its status rather than a line in a 200.
void OllamaApi::Run(const ollama::OllamaRequest& request, const std::string& owner, CallRecord& call,
                    std::chrono::steady_clock::time_point received, const HttpHeaders& headers,
                    HttpExchange& exchange) {
  std::string whole;
  bool begun = false;
  ollama::ReplyWriter out(request, model_.tokenizer, received, [&](const std::string& s) {
    if (!request.stream || request.load_only) {
      whole = s;
      return true;
    }
    if (!begun) {
      begun = true;
      if (!exchange.BeginStream(200, "application/x-ndjson", headers)) return false;
    }
    return exchange.Write(s);
  });
  if (request.load_only) {  // one object even when streaming was asked, as Ollama answers
    out.Loaded();
    exchange.Send(HttpReply{200, "application/json", whole, headers});
    call.Finish(absl::OkStatus()).IgnoreError();
    return;
  }
  out.Queued();
  absl::Status st = StreamGenerate(
      *core_, request.job, owner, call, [&](const GenerateUpdate& u) { return out.Add(u); },
      [this, &exchange] { return stopping_.load() || exchange.ClientGone(); });
  if (absl::IsCancelled(st) && stopping_.load()) st = absl::UnavailableError("server is shutting down");
  call.SetTokens(out.prompt_tokens(), out.cached_tokens(), out.completion_tokens());
  call.Finish(st).IgnoreError();
  if (st.ok() && out.Finish() && !request.stream) {
    exchange.Send(HttpReply{200, "application/json", whole, headers});
  } else if (!st.ok() && !begun) {  // every request answers, a cancelled one with 499
    exchange.Send(ErrorReply(ErrorOf(st), headers));
  } else if (!st.ok() && !absl::IsCancelled(st)) {
    out.Fail(ErrorOf(st).message);
  }
  if (begun) exchange.EndStream();
}

}  // namespace shardlm
