// The coordinator's side of worker start-up (shardlm.worker.v1.Rendezvous):
// registration with a barrier (ranks in arrival order, replies sent once all
// have joined), model-fingerprint and protocol checks, and the key-value store
// the collectives bootstrap through.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "shardlm/worker/v1/worker.grpc.pb.h"

namespace shardlm {

class RendezvousService final : public ::shardlm::worker::v1::Rendezvous::Service {
 public:
  // `settings` is the reply template (dtype, KV budget, timeouts); rank and
  // world size are filled in per worker.
  RendezvousService(int world_size, std::string fingerprint,
                    ::shardlm::worker::v1::RegisterResponse settings);

  grpc::Status Register(grpc::ServerContext* ctx, const ::shardlm::worker::v1::RegisterRequest* req,
                        ::shardlm::worker::v1::RegisterResponse* resp) override;
  grpc::Status StoreSet(grpc::ServerContext* ctx, const ::shardlm::worker::v1::StoreSetRequest* req,
                        ::shardlm::worker::v1::StoreSetResponse* resp) override;
  grpc::Status StoreGet(grpc::ServerContext* ctx, const ::shardlm::worker::v1::StoreGetRequest* req,
                        ::shardlm::worker::v1::StoreGetResponse* resp) override;

  // Worker addresses by rank once all have registered; DeadlineExceeded naming
  // how many joined otherwise.
  absl::StatusOr<std::vector<std::string>> WaitForWorkers(std::chrono::milliseconds timeout);
  // Wakes blocked handlers so the server can shut down.
  void Shutdown();

 private:
  const int world_size_;
  const std::string fingerprint_;
  const ::shardlm::worker::v1::RegisterResponse settings_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> addresses_;  // by rank
  std::vector<uint64_t> tickets_;       // which Register call holds each slot
  uint64_t next_ticket_ = 0;
  std::map<std::string, std::string> store_;
  bool shutdown_ = false;
};

}  // namespace shardlm
