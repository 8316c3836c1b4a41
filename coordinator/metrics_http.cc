#include "coordinator/metrics_http.h"

#include <httplib.h>

namespace shardlm {

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& host, int port, std::function<std::string()> render) {
  auto server = std::make_unique<httplib::Server>();
  server->Get("/metrics", [render](const httplib::Request&, httplib::Response& res) {
    res.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  auto listener = HttpListener::Start(std::move(server), host, port, "--metrics-port");
  if (!listener.ok()) return listener.status();
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer());
  s->listener_ = std::move(*listener);
  return s;
}

}  // namespace shardlm
