#include "coordinator/http/http_server.h"

#include <future>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "coordinator/http/http_server_impl.h"

namespace shardlm {

using namespace http_impl;  // NOLINT: the server's own insides (http_server_impl.h)

const std::string* HttpRequest::Header(absl::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (absl::EqualsIgnoreCase(k, name)) return &v;
  }
  return nullptr;
}

HttpRoute HttpRoute::Quick(std::string method, std::string path, QuickHandler h) {
  return HttpRoute{std::move(method), std::move(path), std::move(h), nullptr};
}

HttpRoute HttpRoute::Slow(std::string method, std::string path, SlowHandler h) {
  return HttpRoute{std::move(method), std::move(path), nullptr, std::move(h)};
}

bool http_impl::PathMatches(const HttpRoute& route, const std::string& path) {
  const std::string& p = route.path;
  if (p.empty() || p.back() != '*') return path == p;
  return path.size() >= p.size() && absl::StartsWith(path, absl::string_view(p).substr(0, p.size() - 1));
}

void HttpServer::Impl::EnforceLimits() {
  auto oldest = [this](bool reading_too) {
    ConnectionBase* best = nullptr;
    for (ConnectionBase* c : connections) {
      const bool eligible =
          c->state == ConnState::kIdle ||
          (reading_too && (c->state == ConnState::kReading || c->state == ConnState::kHandshake));
      if (eligible && (best == nullptr || c->since < best->since)) best = c;
    }
    return best;
  };
  int idle = 0;
  for (ConnectionBase* c : connections) idle += c->state == ConnState::kIdle ? 1 : 0;
  while (idle > options.max_idle_connections) {
    ConnectionBase* c = oldest(false);
    if (c == nullptr) break;
    c->Close();
    --idle;
  }
  while (static_cast<int>(connections.size()) > options.max_connections) {
    ConnectionBase* c = oldest(false);
    if (c == nullptr) c = oldest(true);
    if (c == nullptr) break;  // every connection is in a handler
    c->Close();
  }
}

const HttpRoute* HttpServer::Impl::Find(const std::string& method, const std::string& path,
                                        bool* path_known) const {
  *path_known = false;
  const std::string& as = method == "HEAD" ? std::string("GET") : method;  // HEAD: GET without the body
  for (const HttpRoute& r : routes) {
    if (!PathMatches(r, path)) continue;
    *path_known = true;
    if (r.method == as) return &r;
  }
  return nullptr;
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

int HttpServer::port() const { return impl_->port; }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpServerOptions options,
                                                              std::vector<HttpRoute> routes) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->routes = std::move(routes);
  const HttpServerOptions& o = impl->options;
  if (o.tls.enabled()) {
    try {
      impl->tls.emplace(ssl::context::tls_server);
      impl->tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                             ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
      impl->tls->use_certificate_chain_file(o.tls.cert);
      impl->tls->use_private_key_file(o.tls.key, ssl::context::pem);
      if (!o.tls.client_ca.empty()) {
        impl->tls->load_verify_file(o.tls.client_ca);
        impl->tls->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
      }
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(o.flag, ": cannot use the TLS certificate '", o.tls.cert,
                                                     "' and key '", o.tls.key, "': ", e.what()));
    }
  }
  const std::string where = absl::StrCat(o.host, ":", o.port);
  beast::error_code ec;
  tcp::resolver resolver(impl->ioc);
  auto endpoints = resolver.resolve(o.host, std::to_string(o.port), tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) {
    return absl::UnavailableError(
        absl::StrCat(o.flag, ": cannot listen on ", where, " (not an address here)"));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  tcp::acceptor& a = impl->acceptor;
  a.open(endpoint.protocol(), ec);
  // A restarted server rebinds at once (SO_REUSEADDR), but never shares the port.
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat(o.flag, ": cannot listen on ", where, " (", ec.message(), ")"));
  }
  impl->port = a.local_endpoint().port();
  Impl* raw = impl.get();
  raw->Accept();
  for (int i = 0; i < std::max(1, o.threads); ++i) raw->workers.emplace_back([raw] { raw->WorkerLoop(); });
  raw->io_thread = std::thread([raw] {
    for (;;) {
      try {
        raw->ioc.run();
        return;
      } catch (const std::exception& e) {  // a handler's exception must not end the process
        LOG(ERROR) << raw->options.flag << ": " << e.what();
      }
    }
  });
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::~HttpServer() {
  Impl* s = impl_.get();
  s->stopping = true;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->stop_jobs = true;  // queued jobs still run; new ones are refused (503)
  }
  s->cv.notify_all();
  // Stop accepting, and close what is not running a handler.
  net::post(s->ioc, [s] {
    beast::error_code ignored;
    s->acceptor.close(ignored);
    std::vector<ConnectionBase*> idle;
    for (ConnectionBase* c : s->connections) {
      if (c->state != ConnState::kBusy) idle.push_back(c);
    }
    for (ConnectionBase* c : idle) c->Close();
  });
  for (std::thread& t : s->workers) t.join();  // handlers end (their owners cancel them), last writes go out
  net::post(s->ioc, [s] {
    std::vector<ConnectionBase*> all(s->connections.begin(), s->connections.end());
    for (ConnectionBase* c : all) c->Close();
  });
  // Give the final closes a moment, then stop.
  auto until = Clock::now() + std::chrono::seconds(1);
  while (Clock::now() < until && !s->ioc.stopped()) {
    bool empty = false;
    auto p = std::make_shared<std::promise<bool>>();
    auto f = p->get_future();
    net::post(s->ioc, [s, p] { p->set_value(s->connections.empty()); });
    if (f.wait_for(std::chrono::milliseconds(200)) == std::future_status::ready) empty = f.get();
    if (empty) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  s->ioc.stop();
  if (s->io_thread.joinable()) s->io_thread.join();
}

}  // namespace shardlm
