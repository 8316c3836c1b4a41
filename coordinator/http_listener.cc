#include "coordinator/http_listener.h"

#include <httplib.h>

#include <chrono>

#include "absl/strings/str_cat.h"

namespace shardlm {

absl::StatusOr<std::unique_ptr<HttpListener>> HttpListener::Start(std::unique_ptr<httplib::Server> server,
                                                                  const std::string& host, int port,
                                                                  const std::string& flag) {
  std::unique_ptr<HttpListener> l(new HttpListener());
  l->server_ = std::move(server);
  l->server_->set_socket_options([](socket_t sock) {
    int one = 1;  // a restarted server rebinds at once, but never shares the port
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  });
  if (port == 0) {
    l->port_ = l->server_->bind_to_any_port(host);
    if (l->port_ < 0) l->port_ = 0;
  } else if (l->server_->bind_to_port(host, port)) {
    l->port_ = port;
  }
  if (l->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat(flag, ": cannot listen on ", host, ":", port, " (in use, or not an address here)"));
  }
  httplib::Server* raw = l->server_.get();
  l->thread_ = std::thread([raw] { raw->listen_after_bind(); });
  // stop() is a no-op until the server runs: wait, so the destructor always stops it.
  while (!raw->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return l;
}

HttpListener::~HttpListener() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace shardlm
