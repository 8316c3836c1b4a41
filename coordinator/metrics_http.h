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
#include <thread>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}

namespace shardlm {

class MetricsHttpServer {
 public:
  // Binds host:port (port 0: any free one) and serves GET /metrics with
  // `render`'s text; UNAVAILABLE naming the address if it cannot bind.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& host, int port,
                                                                  std::function<std::string()> render);
  ~MetricsHttpServer();

  int port() const { return port_; }

 private:
  MetricsHttpServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace shardlm
