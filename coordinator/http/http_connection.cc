// One HTTP connection of HttpServer: reads requests, answers quick routes on
// the I/O thread, hands slow ones to the request threads, writes replies and
// streams, keeps the connection alive or closes it (docs/openai.md).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <memory>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "coordinator/http/http_server_impl.h"

namespace shardlm {

using namespace http_impl;  // NOLINT: the server's own insides (http_server_impl.h)
namespace {

std::string Str(beast::string_view s) { return std::string(s.data(), s.size()); }

// The status line and headers every response of this server carries.
template <class Body>
void FillHead(http::response<Body>& res, int status, const std::string& content_type,
              const HttpHeaders& headers, bool keep_alive) {
  res.version(11);
  res.result(static_cast<unsigned>(status));
  res.set(http::field::content_type, content_type);
  for (const auto& [k, v] : headers) res.insert(k, v);
  res.keep_alive(keep_alive);
}

template <class Stream>
class Connection : public ConnectionBase, public std::enable_shared_from_this<Connection<Stream>> {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  template <class... Args>
  Connection(HttpServer::Impl* server, Args&&... args)
      : server_(server), stream_(std::forward<Args>(args)...) {}
  ~Connection() override { server_->Unregister(this); }

  void Start() {
    server_->Register(this);
    if (closed_) return;  // closed at once to respect max_connections
    if constexpr (kTls) {
      Enter(ConnState::kHandshake);
      Lowest().expires_after(server_->options.request_timeout);
      stream_.async_handshake(ssl::stream_base::server, [self = Self()](beast::error_code ec) {
        if (ec) return self->Close();
        self->WaitForRequest();
      });
    } else {
      WaitForRequest();
    }
  }

  void Close() override {
    if (closed_) return;
    closed_ = true;
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
    Lowest().close();
    server_->Unregister(this);
  }

  // --- used by the request thread, through Exchange ---

  // Runs `op` on the I/O thread and waits for the result it reports.
  bool OnIoThread(std::function<void(std::function<void(bool)>)> op) {
    if (broken_.load()) return false;
    auto done = std::make_shared<std::promise<bool>>();
    std::future<bool> result = done->get_future();
    net::post(server_->ioc, [self = Self(), op = std::move(op), done] {
      if (self->closed_ || self->broken_.load()) return done->set_value(false);
      try {
        op([self, done](bool ok) {
          if (!ok) self->broken_ = true;
          done->set_value(ok);
        });
      } catch (const std::exception& e) {  // e.g. a status Beast cannot write
        LOG(ERROR) << self->server_->options.flag << ": " << e.what();
        self->broken_ = true;
        done->set_value(false);
      }
    });
    return result.get();
  }

  void AsyncSend(const HttpReply& reply, std::function<void(bool)> done) {
    auto res = MakeResponse(reply, keep_alive_ && !server_->stopping.load());
    Lowest().expires_after(server_->options.write_timeout);
    http::async_write(stream_, *res, [res, done](beast::error_code ec, size_t) { done(!ec); });
  }

  void AsyncBeginStream(int status, const std::string& content_type, const HttpHeaders& headers,
                        std::function<void(bool)> done) {
    struct Head {
      http::response<http::empty_body> res;
      std::optional<http::response_serializer<http::empty_body>> sr;
    };
    auto head = std::make_shared<Head>();
    FillHead(head->res, status, content_type, headers, keep_alive_ && !server_->stopping.load() && !http10_);
    head->res.chunked(!http10_);
    head->sr.emplace(head->res);
    Lowest().expires_after(server_->options.write_timeout);
    http::async_write_header(stream_, *head->sr, [head, done](beast::error_code ec, size_t) { done(!ec); });
    stream_keep_alive_ = head->res.keep_alive();
  }

  void AsyncWriteChunk(std::shared_ptr<std::string> data, std::function<void(bool)> done) {
    Lowest().expires_after(server_->options.write_timeout);
    if (http10_) {  // no chunking: the bytes as they are, ended by the close
      net::async_write(stream_, net::buffer(*data),
                       [data, done](beast::error_code ec, size_t) { done(!ec); });
      return;
    }
    net::async_write(stream_, http::make_chunk(net::buffer(*data)),
                     [data, done](beast::error_code ec, size_t) { done(!ec); });
  }

  void AsyncEndStream(std::function<void(bool)> done) {
    if (http10_) return done(true);
    Lowest().expires_after(server_->options.write_timeout);
    net::async_write(stream_, http::make_chunk_last(), [done](beast::error_code ec, size_t) { done(!ec); });
  }

  bool ClientGone() const {
    if (broken_.load()) return true;
    if (busy_fd_ < 0) return false;
    pollfd p{busy_fd_, POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
  }

  // The request thread's handler has returned: on the I/O thread, go on
  // with the connection (or close it).
  void AfterHandler(bool streamed) {
    net::post(server_->ioc, [self = Self(), streamed] {
      self->EndBusy();
      const bool keep = streamed ? self->stream_keep_alive_ : self->keep_alive_;
      if (self->closed_ || self->broken_.load() || !keep || self->server_->stopping.load()) {
        return self->GracefulClose();
      }
      self->WaitForRequest();
    });
  }

  // The handler is done with its descriptor (I/O thread).
  void EndBusy() {
    if (busy_fd_ >= 0) ::close(busy_fd_);
    busy_fd_ = -1;
  }

 private:
  std::shared_ptr<Connection> Self() { return this->shared_from_this(); }
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }
  void Enter(ConnState s) {
    state = s;
    since = Clock::now();
  }

  // Waits, holding no thread, for the first bytes of the next request (read
  // through the stream: with TLS they may already sit decrypted in its
  // buffer, where the socket would never show them).
  void WaitForRequest() {
    if (closed_) return;
    if (buffer_.size() > 0) return ReadRequest();  // pipelined: already here
    Enter(ConnState::kIdle);
    server_->EnforceLimits();
    if (closed_) return;
    Lowest().expires_after(server_->options.idle_timeout);
    stream_.async_read_some(buffer_.prepare(4096), [self = Self()](beast::error_code ec, size_t n) {
      if (ec || self->closed_) return self->Close();  // idle too long, or the client closed
      self->buffer_.commit(n);
      self->ReadRequest();
    });
  }

  // Reads one whole request within request_timeout of now.
  void ReadRequest() {
    Enter(ConnState::kReading);
    parser_.emplace();
    parser_->body_limit(server_->options.max_body_bytes);
    parser_->header_limit(static_cast<uint32_t>(server_->options.max_header_bytes));
    Lowest().expires_after(server_->options.request_timeout);
    http::async_read_header(stream_, buffer_, *parser_, [self = Self()](beast::error_code ec, size_t) {
      if (ec) return self->OnReadError(ec);
      auto& req = self->parser_->get();
      if (absl::EqualsIgnoreCase(Str(req[http::field::expect]), "100-continue")) {
        static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        net::async_write(self->stream_, net::buffer(kContinue), [self](beast::error_code ec, size_t) {
          if (ec) return self->Close();
          self->ReadBody();
        });
        return;
      }
      self->ReadBody();
    });
  }

  void ReadBody() {
    http::async_read(stream_, buffer_, *parser_, [self = Self()](beast::error_code ec, size_t) {
      if (ec) return self->OnReadError(ec);
      self->Lowest().expires_never();
      self->Dispatch(self->parser_->release());
    });
  }

  void OnReadError(beast::error_code ec) {
    // A request not whole within request_timeout: Beast has closed the
    // socket already, so no 408 can go out; Close below tidies up.
    if (ec == http::error::body_limit) {
      return Reply(server_->Error(413, "the request body is too large"), false);
    }
    if (ec == http::error::header_limit) {
      return Reply(server_->Error(431, "the request headers are too large"), false);
    }
    const beast::error_code eos = http::error::end_of_stream;
    if (ec.category() == eos.category() && ec != http::error::end_of_stream &&
        ec != http::error::partial_message) {
      return Reply(server_->Error(400, absl::StrCat("malformed HTTP request: ", ec.message())), false);
    }
    Close();  // the client closed or reset the connection
  }

  void Dispatch(http::request<http::string_body> req) {
    if (closed_) return;  // closed (evicted, timed out, shutting down) as the request completed
    auto request = std::make_shared<HttpRequest>();
    request->method = Str(req.method_string());
    const std::string target = Str(req.target());
    const size_t question = target.find('?');
    request->path = target.substr(0, question);
    if (question != std::string::npos) request->query = target.substr(question + 1);
    for (const auto& field : req) request->headers.emplace_back(Str(field.name_string()), Str(field.value()));
    request->body = std::move(req.body());
    // HTTP/1.0 gets no chunked stream (the close ends it); a HEAD is
    // answered without the body and the connection then closes.
    http10_ = req.version() < 11;
    head_ = req.method() == http::verb::head;
    keep_alive_ = req.keep_alive() && !head_;
    bool path_known = false;
    const HttpRoute* route = server_->Find(request->method, request->path, &path_known);
    if (route == nullptr && path_known) {
      HttpReply reply =
          server_->Error(405, absl::StrCat("method ", request->method, " is not allowed on ", request->path));
      std::string allow;
      for (const HttpRoute& r : server_->routes) {
        if (PathMatches(r, request->path)) absl::StrAppend(&allow, allow.empty() ? "" : ", ", r.method);
      }
      reply.headers.emplace_back("Allow", allow);
      return Reply(reply, keep_alive_);
    }
    if (route == nullptr) {
      return Reply(server_->Error(404, absl::StrCat("no route ", request->method, " ", request->path)),
                   keep_alive_);
    }
    if (route->quick) {
      HttpReply reply;
      try {
        reply = route->quick(*request);
      } catch (const std::exception& e) {
        reply = server_->Error(500, e.what());
      }
      return Reply(reply, keep_alive_);
    }
    if (server_->stopping.load()) return Reply(server_->Error(503, "the server is shutting down"), false);
    Enter(ConnState::kBusy);
    // A descriptor of its own for ClientGone: the socket's number cannot be
    // reused by another connection while the handler polls it.
    busy_fd_ = ::dup(Lowest().socket().native_handle());
    if (!server_->Submit([self = Self(), route, request] { self->RunSlow(*route, *request); })) {
      EndBusy();
      return Reply(server_->Error(503, "the server is shutting down"), false);
    }
  }

  void RunSlow(const HttpRoute& route, const HttpRequest& request);

  // Writes a reply from the I/O thread, then waits for the next request or closes.
  void Reply(const HttpReply& reply, bool keep_alive) {
    if (closed_) return;
    auto res = MakeResponse(reply, keep_alive && !server_->stopping.load());
    Enter(ConnState::kWriting);
    Lowest().expires_after(server_->options.write_timeout);
    http::async_write(stream_, *res, [self = Self(), res](beast::error_code ec, size_t) {
      if (ec) return self->Close();
      if (res->keep_alive()) return self->WaitForRequest();
      self->GracefulClose();
    });
  }

  void GracefulClose() {
    if (closed_) return;
    if constexpr (kTls) {
      Enter(ConnState::kWriting);
      Lowest().expires_after(std::chrono::seconds(1));
      stream_.async_shutdown([self = Self()](beast::error_code) { self->Close(); });
    } else {
      Close();
    }
  }

  std::shared_ptr<http::response<http::string_body>> MakeResponse(const HttpReply& reply, bool keep_alive) {
    auto res = std::make_shared<http::response<http::string_body>>();
    FillHead(*res, reply.status, reply.content_type, reply.headers, keep_alive);
    res->body() = reply.body;
    res->prepare_payload();
    if (head_) res->body().clear();  // Content-Length stays: the size a GET would get
    return res;
  }

  HttpServer::Impl* server_;
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool closed_ = false;
  bool keep_alive_ = false;
  bool stream_keep_alive_ = false;
  bool http10_ = false;              // the request was HTTP/1.0
  bool head_ = false;                // the request was HEAD
  std::atomic<bool> broken_{false};  // a write failed while a handler ran
  int busy_fd_ = -1;                 // a dup of the socket while a slow handler runs
};

// The HttpExchange a slow handler writes through.
template <class Stream>
class Exchange : public HttpExchange {
 public:
  explicit Exchange(Connection<Stream>* c) : c_(c) {}
  bool Send(const HttpReply& reply) override {
    used_ = true;
    return c_->OnIoThread([this, reply](std::function<void(bool)> done) { c_->AsyncSend(reply, done); });
  }
  bool BeginStream(int status, const std::string& content_type, const HttpHeaders& headers) override {
    used_ = true;
    streamed_ = true;
    return c_->OnIoThread([this, status, content_type, headers](std::function<void(bool)> done) {
      c_->AsyncBeginStream(status, content_type, headers, done);
    });
  }
  bool Write(absl::string_view data) override {
    if (data.empty()) return !c_->ClientGone();  // an empty chunk would end the stream
    auto copy = std::make_shared<std::string>(data);
    return c_->OnIoThread([this, copy](std::function<void(bool)> done) { c_->AsyncWriteChunk(copy, done); });
  }
  bool EndStream() override {
    ended_ = true;
    return c_->OnIoThread([this](std::function<void(bool)> done) { c_->AsyncEndStream(done); });
  }
  bool ClientGone() const override { return c_->ClientGone(); }

  bool used() const { return used_; }
  bool streamed() const { return streamed_; }
  bool ended() const { return ended_; }

 private:
  Connection<Stream>* c_;
  bool used_ = false;
  bool streamed_ = false;
  bool ended_ = false;
};

template <class Stream>
void Connection<Stream>::RunSlow(const HttpRoute& route, const HttpRequest& request) {
  Exchange<Stream> exchange(this);
  try {
    route.slow(request, exchange);
  } catch (const std::exception& e) {
    LOG(ERROR) << "http: " << request.method << " " << request.path << ": " << e.what();
    if (!exchange.used()) exchange.Send(server_->Error(500, e.what()));
  }
  if (!exchange.used()) exchange.Send(server_->Error(500, "the handler gave no answer"));
  if (exchange.streamed() && !exchange.ended()) broken_ = true;  // a stream cut short cannot be reused
  AfterHandler(exchange.streamed());
}

}  // namespace

void HttpServer::Impl::Accept() {
  acceptor.async_accept(ioc, [this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
      LOG(WARNING) << options.flag << ": accept failed: " << ec.message();
      // Out of descriptors, say: pause rather than spin.
      auto timer = std::make_shared<net::steady_timer>(ioc, std::chrono::milliseconds(100));
      timer->async_wait([this, timer](beast::error_code) { Accept(); });
      return;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    if (tls) {
      auto c =
          std::make_shared<Connection<beast::ssl_stream<beast::tcp_stream>>>(this, std::move(socket), *tls);
      c->Start();
    } else {
      auto c = std::make_shared<Connection<beast::tcp_stream>>(this, std::move(socket));
      c->Start();
    }
    Accept();
  });
}

}  // namespace shardlm
