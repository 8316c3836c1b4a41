// gloo::rendezvous::Store over the coordinator's Rendezvous service, so ranks
// bootstrap their collectives without a shared file system.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "shardlm/worker/v1/worker.grpc.pb.h"

namespace shardlm {

class RemoteStore final : public gloo::rendezvous::Store {
 public:
  // `token`: the internal token every call carries (empty: none).
  RemoteStore(std::shared_ptr<::shardlm::worker::v1::Rendezvous::StubInterface> stub, std::string token,
              std::string prefix, std::chrono::milliseconds timeout)
      : stub_(std::move(stub)), token_(std::move(token)), prefix_(std::move(prefix)), timeout_(timeout) {}

  // Gloo's interface reports failure by throwing; MakeGlooCommunicator turns
  // that into a status.
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::vector<char> Get(const std::string& key, std::chrono::milliseconds timeout);

  std::shared_ptr<::shardlm::worker::v1::Rendezvous::StubInterface> stub_;
  std::string token_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

}  // namespace shardlm
