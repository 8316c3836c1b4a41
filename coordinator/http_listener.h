// Serves a cpp-httplib server on a thread of its own: the metrics port and
// the OpenAI HTTP API both run this way.
//
//   auto server = std::make_unique<httplib::Server>();
//   server->Get("/metrics", ...);
//   SHARDLM_ASSIGN_OR_RETURN(auto listener, HttpListener::Start(std::move(server), host, 0,
//   "--metrics-port"));
//   ... listener->port() ...   // destroying the listener stops the server
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}

namespace shardlm {

class HttpListener {
 public:
  // Binds host:port (port 0: any free one; a restarted server rebinds at
  // once, but never shares a port) and serves `server`. UNAVAILABLE naming
  // `flag` and the address when it cannot bind.
  static absl::StatusOr<std::unique_ptr<HttpListener>> Start(std::unique_ptr<httplib::Server> server,
                                                             const std::string& host, int port,
                                                             const std::string& flag);
  ~HttpListener();

  int port() const { return port_; }

 private:
  HttpListener() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace shardlm
