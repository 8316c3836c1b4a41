// Publishes the prefix cache's changes over ZeroMQ as vLLM does, for routers
// that route by where a prefix is cached (llm-d's KV cache indexer, NVIDIA
// Dynamo): each batch of a step's events is one multipart message
// [topic, 8-byte big-endian sequence number, MessagePack payload] on a PUB
// socket, and an optional ROUTER socket replays the last batches to a
// subscriber that missed some. See docs/kv_events.md.
//
// A ZeroMQ socket belongs to one thread: the engine's driver only queues
// (Publish does not block); the publisher's own thread encodes, sends and
// answers replay requests.
//
//   KvEventPublisherOptions o;
//   o.endpoint = "tcp://*:5557";   // '*' binds; "tcp://host:port" connects (as vLLM)
//   SHARDLM_ASSIGN_OR_RETURN(auto publisher, KvEventPublisher::Start(o));
//   engine_options.kv_events = publisher.get();
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/events/kv_event_encoding.h"
#include "kv/kv_events.h"

namespace shardlm {

struct KvEventPublisherOptions {
  std::string endpoint;         // PUB: bound when it has '*' or is ipc:// or inproc://, else connected
  std::string replay_endpoint;  // ROUTER, bound; empty: no replay
  std::string topic;            // the first frame of every message (llm-d reads kv@<pod>@<model>)
  KvEventFormat format;
  size_t replay_batches = 10000;       // the last batches kept for replay
  size_t max_queued_batches = 100000;  // waiting to be sent; past it a batch is dropped (and counted)
  int send_high_water_mark = 100000;
};

class KvEventPublisher : public KvEventSink {
 public:
  // Opens the sockets (an endpoint that cannot be bound or is malformed is
  // InvalidArgument naming the flag) and starts the thread.
  static absl::StatusOr<std::unique_ptr<KvEventPublisher>> Start(KvEventPublisherOptions options);
  // Sends what is queued (for at most a second), then closes.
  ~KvEventPublisher() override;
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  void Publish(std::vector<KvEvent> events) override;

  // The endpoints as bound (a '*' port resolved), for the log.
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }
  int64_t dropped() const { return dropped_.load(); }

 private:
  struct Batch {
    double timestamp_s = 0;
    std::vector<KvEvent> events;
  };

  explicit KvEventPublisher(KvEventPublisherOptions options);
  absl::Status Open();
  void Run();
  // Sends one batch and keeps it for replay.
  void Send(const Batch& batch);
  // Answers one replay request: every kept batch from its sequence number on, then -1.
  void ServeReplay();

  KvEventPublisherOptions options_;
  void* context_ = nullptr;
  void* pub_ = nullptr;
  void* replay_ = nullptr;
  std::string endpoint_;
  std::string replay_endpoint_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;  // guarded by mu_
  bool stopping_ = false;    // guarded by mu_
  std::atomic<int64_t> dropped_{0};

  // The publisher thread's own.
  int64_t next_seq_ = 0;
  std::deque<std::pair<int64_t, std::string>> kept_;
  std::thread thread_;
};

}  // namespace shardlm
