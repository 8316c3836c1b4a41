// The /metrics endpoint: Prometheus text format over plain HTTP, on its own
// port apart from the gRPC one, answered on the HTTP server's I/O thread so
// that a scrape never queues behind inference calls or slow clients.
//
//   auto http = MetricsHttpServer::Start("0.0.0.0", 9090, [&] { return registry.Render(); });
//   ... (*http)->port() ...
//   http->reset();  // stops it
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/http/http_server.h"

namespace shardlm {

// GET /metrics with `render`'s text (Prometheus' text format), for any HTTP server.
HttpRoute MetricsRoute(std::function<std::string()> render);

class MetricsHttpServer {
 public:
  // Binds host:port (port 0: any free one) and serves GET /metrics with
  // `render`'s text; UNAVAILABLE naming the address if it cannot bind.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& host, int port,
                                                                  std::function<std::string()> render);

  int port() const { return server_->port(); }

 private:
  MetricsHttpServer() = default;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace shardlm
