#include "coordinator/openai_http.h"

#include <dirent.h>
#include <httplib.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <ctime>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/logging.h"

namespace shardlm {
namespace {

namespace pb = ::shardlm::v1;
using openai::ApiError;
using openai::Json;

// The socket of a request's connection: the descriptor whose addresses are
// the request's. httplib does not hand its socket to handlers, so it is found
// once per request among this process's descriptors (-1 if none matches).
int FindSocket(const httplib::Request& req) {
  auto numeric = [](const sockaddr_storage& a, socklen_t len, std::string* host, int* port) {
    char h[NI_MAXHOST], p[NI_MAXSERV];
    if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, h, sizeof(h), p, sizeof(p),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
      return false;
    }
    *host = h;
    *port = std::atoi(p);
    return true;
  };
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    sockaddr_storage peer{}, local{};
    socklen_t peer_len = sizeof(peer), local_len = sizeof(local);
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) continue;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) continue;
    std::string peer_host, local_host;
    int peer_port = 0, local_port = 0;
    if (numeric(peer, peer_len, &peer_host, &peer_port) &&
        numeric(local, local_len, &local_host, &local_port) && peer_port == req.remote_port &&
        peer_host == req.remote_addr && local_port == req.local_port && local_host == req.local_addr) {
      found = fd;
      break;
    }
  }
  closedir(dir);
  return found;
}

// Whether the client has closed its side of `fd` (or the connection broke).
// With TLS a close_notify may sit unread in the socket, which is why this
// asks poll for a hang-up rather than peeking for end of file.
bool ClientGone(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

void SendError(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  res.set_content(e.Body().dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
}

int64_t UnixNow() { return static_cast<int64_t>(std::time(nullptr)); }

// Runs every prompt of `r` through the service (concurrently when there are
// several); the first failure cancels the others.
grpc::Status RunPrompts(InferenceService* service, const openai::OpenAiRequest& r, const std::string& owner,
                        CallRecord& call, openai::ResponseWriter& out, const std::function<bool()>& gone) {
  std::atomic<bool> abort{false};
  std::vector<grpc::Status> status(r.prompts.size());
  auto run = [&](size_t i) {
    status[i] = service->StreamGenerate(
        r.prompts[i], owner, call,
        [&](const pb::GenerateResponse& msg) {
          if (!out.Add(static_cast<int>(i), msg)) abort = true;
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
        status[j] = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                 absl::StrCat("cannot start a thread for prompt ", j, ": ", e.what()));
      }
      break;
    }
  }
  run(0);
  for (std::thread& t : threads) t.join();
  call.SetTokens(out.prompt_tokens(), out.cached_tokens(), out.completion_tokens());
  for (const grpc::Status& st : status) {
    if (!st.ok() && st.error_code() != grpc::StatusCode::CANCELLED) return st;
  }
  for (const grpc::Status& st : status) {
    if (!st.ok()) return st;
  }
  return grpc::Status::OK;
}

}  // namespace

absl::StatusOr<std::unique_ptr<OpenAiHttpServer>> OpenAiHttpServer::Start(InferenceService* service,
                                                                          OpenAiHttpOptions options) {
  std::unique_ptr<OpenAiHttpServer> s(new OpenAiHttpServer());
  s->service_ = service;
  s->options_ = std::move(options);
  const TlsFiles& tls = s->options_.tls;
  std::unique_ptr<httplib::Server> server;
  if (tls.enabled()) {
    auto ssl = std::make_unique<httplib::SSLServer>(tls.cert.c_str(), tls.key.c_str(),
                                                    tls.client_ca.empty() ? nullptr : tls.client_ca.c_str());
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat("--http-port: cannot use the TLS certificate '",
                                                     tls.cert, "' and key '", tls.key, "'"));
    }
    server = std::move(ssl);
  } else {
    server = std::make_unique<httplib::Server>();
  }
  const int threads = s->options_.threads;
  server->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  server->set_payload_max_length(s->options_.max_body_bytes);
  // httplib holds a thread per connection while it is kept alive: keep that short.
  server->set_keep_alive_max_count(100);
  server->set_keep_alive_timeout(3);
  server->set_write_timeout(30);
  s->Routes(*server);
  auto listener = HttpListener::Start(std::move(server), s->options_.host, s->options_.port, "--http-port");
  if (!listener.ok()) return listener.status();
  s->listener_ = std::move(*listener);
  return s;
}

OpenAiHttpServer::~OpenAiHttpServer() {
  stopping_ = true;
  listener_.reset();
}

grpc::Status OpenAiHttpServer::Run(const openai::OpenAiRequest& request, const std::string& owner,
                                   CallRecord& call, openai::ResponseWriter& out, int fd) {
  grpc::Status st = RunPrompts(service_, request, owner, call, out,
                               [this, fd] { return stopping_.load() || ClientGone(fd); });
  // Cancelled by the server's shutdown, not by the client, which is still there to be told.
  if (st.error_code() == grpc::StatusCode::CANCELLED && stopping_.load()) {
    st = grpc::Status(grpc::StatusCode::UNAVAILABLE, "server is shutting down");
  }
  return st;
}

void OpenAiHttpServer::Routes(httplib::Server& server) {
  // Every answer that is not ours (no route, a body too large) in OpenAI's shape.
  server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e{res.status, absl::StrCat("no route ", req.method, " ", req.path), "not_found_error", "", ""};
    if (res.status == 413)
      e = ApiError{413, "the request body is too large", "invalid_request_error", "", ""};
    if (res.status != 404 && res.status != 413)
      e = ApiError{res.status, "bad request", "invalid_request_error", "", ""};
    SendError(res, e);
  });
  server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
    }
    LOG(ERROR) << "http: " << what;
    SendError(res, ApiError{500, what, "server_error", "", ""});
  });

  server.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool ok = !options_.ready || options_.ready();
    res.status = ok ? 200 : 503;
    res.set_content(ok ? "{\"status\":\"ok\"}" : "{\"status\":\"unavailable\"}", "application/json");
  });

  // The caller's key (empty without keys), or false with the error sent.
  auto admit = [this](const httplib::Request& req, httplib::Response& res, std::string* owner) {
    const bool has = req.has_header("Authorization");
    const std::string value = req.get_header_value("Authorization");
    grpc::Status st = service_->AdmitKey(has ? &value : nullptr, owner);
    if (st.ok()) return true;
    ApiError e = openai::FromStatus(st);
    e.message = absl::StrReplaceAll(e.message, {{"the metadata", "the header"}});
    SendError(res, e);
    return false;
  };

  auto model_object = [](const std::string& name, int64_t max_context) {
    return Json{{"id", name},
                {"object", "model"},
                {"created", 0},
                {"owned_by", "shardlm"},
                {"max_model_len", max_context}};
  };
  server.Get("/v1/models", [this, admit, model_object](const httplib::Request& req, httplib::Response& res) {
    std::string owner;
    if (!admit(req, res, &owner)) return;
    Json data = Json::array();
    for (const std::string& name : options_.model.names)
      data.push_back(model_object(name, options_.model.max_context));
    res.set_content(
        Json{{"object", "list"}, {"data", data}}.dump(-1, ' ', false, Json::error_handler_t::replace),
        "application/json");
  });
  server.Get(R"(/v1/models/(.+))", [this, admit, model_object](const httplib::Request& req,
                                                               httplib::Response& res) {
    std::string owner;
    if (!admit(req, res, &owner)) return;
    const std::string name = req.matches[1];
    for (const std::string& n : options_.model.names) {
      if (n == name) {
        res.set_content(
            model_object(n, options_.model.max_context).dump(-1, ' ', false, Json::error_handler_t::replace),
            "application/json");
        return;
      }
    }
    SendError(res, ApiError{404, absl::StrCat("The model '", name, "' does not exist"), "not_found_error",
                            "model", "model_not_found"});
  });

  auto generate = [this, admit](openai::Endpoint endpoint, const httplib::Request& req,
                                httplib::Response& res) {
    const bool chat = endpoint == openai::Endpoint::kChat;
    auto call =
        std::make_shared<CallRecord>(req.get_header_value("x-request-id"),
                                     chat ? "CreateChatCompletion" : "CreateCompletion", service_->metrics());
    res.set_header("x-request-id", call->id());
    std::string owner;
    if (!admit(req, res, &owner)) {
      call->Finish(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "rejected"));
      return;
    }
    auto fail = [&](const ApiError& e) {
      SendError(res, e);
      grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
      switch (e.http_status) {
        case 400:
        case 413:
          code = grpc::StatusCode::INVALID_ARGUMENT;
          break;
        case 401:
          code = grpc::StatusCode::UNAUTHENTICATED;
          break;
        case 404:
          code = grpc::StatusCode::NOT_FOUND;
          break;
        case 503:
          code = grpc::StatusCode::UNAVAILABLE;
          break;
        default:
          code = grpc::StatusCode::INTERNAL;
      }
      call->Finish(grpc::Status(code, e.message));
    };
    auto request = std::make_shared<openai::OpenAiRequest>();
    ApiError error;
    bool parsed = false;
    const int fd = FindSocket(req);
    if (fd < 0)
      LOG(WARNING) << "request " << call->id() << ": its socket is not found; a disconnect goes unseen";
    call->SetAbandonedCheck([fd] { return fd >= 0 && ClientGone(fd); });
    try {
      // Tokenizing a long prompt stops when the client leaves or the server stops.
      parsed = openai::ParseRequest(endpoint, openai::ParseJson(req.body), options_.model, request.get(),
                                    &error, [this, &call] { return stopping_.load() || call->Abandoned(); });
    } catch (const Json::parse_error& ex) {
      // The parser's own message quotes the body around the error ("last read: ..."): a
      // prompt fragment that must not reach the log. Say where, never what.
      return fail(
          ApiError{400, absl::StrCat("the request body is not valid JSON: a syntax error at byte ", ex.byte),
                   "invalid_request_error", "", ""});
    } catch (const Json::exception& ex) {
      return fail(ApiError{400, absl::StrCat("the request body is not valid JSON (error ", ex.id, ")"),
                           "invalid_request_error", "", ""});
    } catch (const std::invalid_argument& ex) {
      return fail(ApiError{400, absl::StrCat("the request body is not accepted: ", ex.what()),
                           "invalid_request_error", "", ""});
    } catch (const std::exception& ex) {
      return fail(ApiError{500, ex.what(), "server_error", "", ""});
    }
    if (!parsed) return fail(error);
    const std::string id = absl::StrCat(chat ? "chatcmpl-" : "cmpl-", call->id());
    const int64_t created = UnixNow();
    if (!request->stream) {
      std::string body_out;
      openai::ResponseWriter out(*request, options_.model.tokenizer, id, created, [&](const std::string& s) {
        body_out = s;
        return true;
      });
      grpc::Status st = Run(*request, owner, *call, out, fd);
      call->Finish(st);
      if (!st.ok()) return SendError(res, openai::FromStatus(st));
      out.Finish();
      res.set_content(body_out, "application/json");
      return;
    }
    // Streaming: the content provider runs on this connection's thread once
    // the headers are out, and ends the call however the stream ends.
    struct Stream {
      std::shared_ptr<CallRecord> call;
      bool finished = false;
      ~Stream() {
        if (!finished) call->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      }
    };
    auto stream = std::make_shared<Stream>();
    stream->call = call;
    const Tokenizer* tokenizer = options_.model.tokenizer;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [this, stream, request, owner, id, created,
                                                           tokenizer, fd](size_t, httplib::DataSink& sink) {
      openai::ResponseWriter out(*request, tokenizer, id, created,
                                 [&sink](const std::string& s) { return sink.write(s.data(), s.size()); });
      grpc::Status st;
      try {
        st = Run(*request, owner, *stream->call, out, fd);
      } catch (const std::exception& e) {  // an exception here would escape httplib and end the process
        st = grpc::Status(grpc::StatusCode::INTERNAL, e.what());
      }
      stream->finished = true;
      stream->call->Finish(st);
      if (st.ok()) {
        out.Finish();
      } else if (st.error_code() != grpc::StatusCode::CANCELLED) {
        out.Fail(openai::FromStatus(st));
      }
      sink.done();
      return true;
    });
  };
  server.Post("/v1/completions", [generate](const httplib::Request& req, httplib::Response& res) {
    generate(openai::Endpoint::kCompletions, req, res);
  });
  server.Post("/v1/chat/completions", [generate](const httplib::Request& req, httplib::Response& res) {
    generate(openai::Endpoint::kChat, req, res);
  });
}

}  // namespace shardlm
