#include "coordinator/metrics_http.h"

#include <httplib.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace shardlm {

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& host, int port, std::function<std::string()> render) {
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer());
  s->server_ = std::make_unique<httplib::Server>();
  s->server_->Get("/metrics", [render](const httplib::Request&, httplib::Response& res) {
    res.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  s->server_->set_socket_options([](socket_t sock) {
    int one = 1;  // a restarted server rebinds at once, but never shares the port
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  });
  if (port == 0) {
    s->port_ = s->server_->bind_to_any_port(host);
    if (s->port_ < 0) s->port_ = 0;
  } else if (s->server_->bind_to_port(host, port)) {
    s->port_ = port;
  }
  if (s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("--metrics-port: cannot listen on ", host, ":", port,
                                               " (in use, or not an address here)"));
  }
  httplib::Server* server = s->server_.get();
  s->thread_ = std::thread([server] { server->listen_after_bind(); });
  // stop() is a no-op until the server runs: wait, so the destructor always stops it.
  while (!server->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return s;
}

MetricsHttpServer::~MetricsHttpServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace shardlm
