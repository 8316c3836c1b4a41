#include "coordinator/http/metrics_http.h"

#include <utility>

namespace shardlm {

HttpRoute MetricsRoute(std::function<std::string()> render) {
  return HttpRoute::Quick("GET", "/metrics", [render = std::move(render)](const HttpRequest&) {
    HttpReply r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = render();
    return r;
  });
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& host, int port, std::function<std::string()> render) {
  HttpServerOptions o;
  o.host = host;
  o.port = port;
  o.flag = "--metrics-port";
  o.threads = 1;  // no slow routes
  o.max_body_bytes = 64 << 10;
  std::vector<HttpRoute> routes;
  routes.push_back(MetricsRoute(std::move(render)));
  auto server = HttpServer::Start(std::move(o), std::move(routes));
  if (!server.ok()) return server.status();
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer());
  s->server_ = std::move(*server);
  return s;
}

}  // namespace shardlm
