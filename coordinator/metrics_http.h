// The /metrics endpoint: Prometheus text format over plain HTTP, served by
// cpp-httplib (Debian's libcpp-httplib-dev) on its own threads, apart from
// the gRPC port so that scrapes never queue behind inference calls.
//
//   auto http = MetricsHttpServer::Start("0.0.0.0", 9090, [&] { return registry.Render(); });
//   ... (*http)->port() ...
//   http->reset();  // stops it
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/http_listener.h"

namespace shardlm {

class MetricsHttpServer {
 public:
  // Binds host:port (port 0: any free one) and serves GET /metrics with
  // `render`'s text; UNAVAILABLE naming the address if it cannot bind.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& host, int port,
                                                                  std::function<std::string()> render);

  int port() const { return listener_->port(); }

 private:
  MetricsHttpServer() = default;
  std::unique_ptr<HttpListener> listener_;
};

}  // namespace shardlm
