// HttpServer's insides, shared by http_server.cc (start, stop, routes, the
// connection limits) and http_connection.cc (one connection's reads, writes
// and handlers). Nothing else includes it.
#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/http/http_server.h"

namespace shardlm {
namespace http_impl {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// Whether `route` serves `path` (exactly, or by prefix when it ends in '*').
bool PathMatches(const HttpRoute& route, const std::string& path);

// What a connection is doing, for the limits: only kIdle and kReading
// connections are ever closed to make room.
enum class ConnState { kHandshake, kIdle, kReading, kBusy, kWriting };

// A connection as the registry sees it (the I/O thread alone touches it).
class ConnectionBase {
 public:
  virtual ~ConnectionBase() = default;
  virtual void Close() = 0;
  ConnState state = ConnState::kHandshake;
  Clock::time_point since = Clock::now();
  std::list<ConnectionBase*>::iterator self;
  bool registered = false;
};

}  // namespace http_impl

struct HttpServer::Impl {
  HttpServerOptions options;
  std::vector<HttpRoute> routes;
  std::atomic<bool> stopping{false};
  int port = 0;

  // Declared before the io_context so that handlers it still holds (and the
  // connections they keep alive) are destroyed while these exist.
  std::list<http_impl::ConnectionBase*> connections;  // I/O thread only
  std::optional<http_impl::ssl::context> tls;

  http_impl::net::io_context ioc{1};
  // Keeps run() going while no socket operation is pending (every
  // connection in a handler, the acceptor closed): the handlers still post.
  http_impl::net::executor_work_guard<http_impl::net::io_context::executor_type> keep_running =
      http_impl::net::make_work_guard(ioc);
  http_impl::tcp::acceptor acceptor{ioc};
  std::thread io_thread;

  // Request threads: slow routes run here. After the io_context, so that a
  // job never run (and the connection it holds) goes before it.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> jobs;
  bool stop_jobs = false;
  std::vector<std::thread> workers;

  void Accept();
  void Register(http_impl::ConnectionBase* c) {
    c->self = connections.insert(connections.end(), c);
    c->registered = true;
    EnforceLimits();
  }
  void Unregister(http_impl::ConnectionBase* c) {
    if (!c->registered) return;
    connections.erase(c->self);
    c->registered = false;
  }
  // Closes the oldest idle connections past max_idle_connections, then the
  // oldest idle or still-reading ones past max_connections.
  void EnforceLimits();
  const HttpRoute* Find(const std::string& method, const std::string& path, bool* path_known) const;
  // False once the request threads are stopping: the caller answers 503.
  bool Submit(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stop_jobs) return false;
      jobs.push_back(std::move(job));
    }
    cv.notify_one();
    return true;
  }
  void WorkerLoop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [this] { return stop_jobs || !jobs.empty(); });
        if (jobs.empty()) return;  // stopping, and nothing left
        job = std::move(jobs.front());
        jobs.pop_front();
      }
      job();
    }
  }
  HttpReply Error(int status, const std::string& message) const {
    if (options.error_reply) return options.error_reply(status, message);
    HttpReply r;
    r.status = status;
    r.content_type = "text/plain";
    r.body = message;
    return r;
  }
};

}  // namespace shardlm
