// The coordinator's HTTP/1.1 server, for the OpenAI API and the metrics port
// (docs/security.md lists its limits). Boost.Beast over Asio (Debian's
// libboost-dev) does the protocol; this file adds the policy:
//
//  - Every socket read and write runs on one I/O thread, asynchronously, so a
//    connection waiting for bytes holds no thread: a thousand slow clients
//    cost memory, not the request threads.
//  - A whole request (headers and body) must arrive within `request_timeout`
//    of its first byte (the clock does not restart per byte, so a client
//    trickling its headers is cut off: closed); a kept-alive connection may wait
//    `idle_timeout` for its next request; beyond `max_idle_connections` idle
//    ones, or `max_connections` in all, the oldest idle (then the oldest still
//    sending a request) is closed.
//  - A route is quick (health, metrics, model lists: answered on the I/O
//    thread, never waiting for a request thread) or slow (generation: run on
//    one of `threads` request threads, writing through an HttpExchange whose
//    writes the I/O thread carries out).
//
//   std::vector<HttpRoute> routes;
//   routes.push_back(HttpRoute::Quick("GET", "/health", [](const HttpRequest&) { return HttpReply{...}; }));
//   routes.push_back(HttpRoute::Slow("POST", "/v1/completions", [](const HttpRequest& r, HttpExchange& x)
//   {...})); SHARDLM_ASSIGN_OR_RETURN(auto server, HttpServer::Start(options, std::move(routes)));
//   ... server->port() ...   // destroying it stops accepting and waits for the request threads
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tls_files.h"

namespace shardlm {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target without its query string
  std::string query;   // what follows the '?' (percent-encoded, as sent); empty without one
  HttpHeaders headers;
  std::string body;
  // The value of header `name` (case-insensitive), or nullptr.
  const std::string* Header(absl::string_view name) const;
};

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HttpHeaders headers;
};

// How a slow route answers, from its request thread: one Send, or
// BeginStream, Writes and EndStream (chunked). Each call returns once the I/O
// thread has written it (false: the client is gone or too slow to read).
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  virtual bool Send(const HttpReply& reply) = 0;
  virtual bool BeginStream(int status, const std::string& content_type, const HttpHeaders& headers) = 0;
  virtual bool Write(absl::string_view data) = 0;
  virtual bool EndStream() = 0;
  // Whether the client has closed its side (a hang-up on the socket; with
  // TLS a close_notify may sit unread, so this asks poll, not read).
  virtual bool ClientGone() const = 0;
};

struct HttpRoute {
  using QuickHandler = std::function<HttpReply(const HttpRequest&)>;
  using SlowHandler = std::function<void(const HttpRequest&, HttpExchange&)>;
  static HttpRoute Quick(std::string method, std::string path, QuickHandler h);
  static HttpRoute Slow(std::string method, std::string path, SlowHandler h);

  std::string method;
  std::string path;  // exact, or a prefix when it ends in '*'
  QuickHandler quick;
  SlowHandler slow;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;      // 0: any free port
  std::string flag;  // named in errors: "--http-port"
  TlsFiles tls;      // certificate and key: HTTPS (with client_ca: clients must present a certificate)
  int threads = 64;  // request threads for slow routes
  size_t max_body_bytes = 16 << 20;
  size_t max_header_bytes = 64 << 10;
  std::chrono::milliseconds request_timeout{30000};  // first byte to last byte of a request
  std::chrono::milliseconds idle_timeout{5000};      // between requests on a kept-alive connection
  std::chrono::milliseconds write_timeout{30000};    // one write to a client that does not read
  int max_idle_connections = 256;
  int max_connections = 4096;
  // The body of an error the server itself answers (404 no route, 405 a
  // method the path does not take, 400 a malformed request, 413, 431, 500,
  // 503 shutting down): (status, message) -> reply.
  std::function<HttpReply(int, const std::string&)> error_reply;
};

class HttpServer {
 public:
  // Binds and listens on host:port before returning (a connection made from
  // then on is accepted); UNAVAILABLE naming options.flag if it cannot bind,
  // INVALID_ARGUMENT if the TLS files cannot be used.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options,
                                                           std::vector<HttpRoute> routes);
  // Stops accepting, closes connections not in a handler, waits for the
  // request threads' handlers to return (the caller makes them end; a write
  // to a client that does not read gives up after write_timeout), then stops
  // the I/O thread.
  ~HttpServer();

  int port() const;

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardlm
