// The coordinator's side of worker start-up and recovery
// (shardlm.worker.v1.Rendezvous): registration by rank with a barrier
// (replies sent once every rank has joined), model-fingerprint and protocol
// checks, group epochs, and the key-value store the collectives bootstrap
// through.
//
// A group formation is an epoch. Each worker claims its own rank (--rank, or
// its StatefulSet ordinal); two live claims of one rank are refused with
// ALREADY_EXISTS naming both. When the group fails, BeginEpoch() dissolves it:
// members learn it from their heartbeat, register again (a restarted worker
// registers as a new process), and the group forms anew with store keys under
// a fresh prefix, so nothing of the old bootstrap is reused.
//
//   RendezvousService rv(tp, fingerprint, settings, token);
//   SHARDLM_ASSIGN_OR_RETURN(FormedGroup g, rv.WaitForGroup(timeout));
//   ... later, on a failure: rv.BeginEpoch();
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "shardlm/worker/v1/worker.grpc.pb.h"

namespace shardlm {

struct FormedGroup {
  uint64_t epoch = 0;
  std::vector<std::string> addresses;  // by rank
};

class RendezvousService final : public ::shardlm::worker::v1::Rendezvous::Service {
 public:
  // `settings` is the reply template (dtype, KV budget, timeouts); rank,
  // world size, epoch and store prefix are filled in per worker. `token`:
  // the internal token every call must carry (empty: none).
  RendezvousService(int world_size, std::string fingerprint, ::shardlm::worker::v1::RegisterResponse settings,
                    std::string token);

  grpc::Status Register(grpc::ServerContext* ctx, const ::shardlm::worker::v1::RegisterRequest* req,
                        ::shardlm::worker::v1::RegisterResponse* resp) override;
  grpc::Status StoreSet(grpc::ServerContext* ctx, const ::shardlm::worker::v1::StoreSetRequest* req,
                        ::shardlm::worker::v1::StoreSetResponse* resp) override;
  grpc::Status StoreGet(grpc::ServerContext* ctx, const ::shardlm::worker::v1::StoreGetRequest* req,
                        ::shardlm::worker::v1::StoreGetResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const ::shardlm::worker::v1::HeartbeatRequest* req,
                         ::shardlm::worker::v1::HeartbeatResponse* resp) override;

  // The group once every rank has registered in the current epoch;
  // DeadlineExceeded naming the missing ranks otherwise (Cancelled after Shutdown).
  absl::StatusOr<FormedGroup> WaitForGroup(std::chrono::milliseconds timeout);
  // Dissolves the current group (or the one forming) and starts epoch + 1.
  // Returns the new epoch.
  uint64_t BeginEpoch();
  // Dissolves the group only while `epoch` is still the current one (a
  // formation that failed to connect); false when the epoch has moved on.
  bool BeginEpochIfCurrent(uint64_t epoch);
  // Called when a worker claims a rank that a formed group's member holds:
  // true when that member is still alive (the claim is then refused); false
  // dissolves the group so the newcomer can join.
  void SetMemberAliveProbe(std::function<bool(int rank)> probe);
  // Wakes blocked handlers so the server can shut down.
  void Shutdown();

 private:
  uint64_t BeginEpochLocked();  // mu_ held

  struct Claim {
    std::string address;
    uint64_t ticket = 0;
  };

  const int world_size_;
  const std::string fingerprint_;
  const ::shardlm::worker::v1::RegisterResponse settings_;
  const std::string token_;
  // Tells this process from an earlier coordinator whose workers are still up:
  // their epoch numbers may coincide with ours, this never does.
  const std::string id_;
  std::function<bool(int)> member_alive_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t epoch_ = 1;
  bool formed_ = false;                      // every rank of epoch_ has registered
  std::vector<std::optional<Claim>> slots_;  // by rank, for epoch_
  uint64_t next_ticket_ = 0;
  std::map<std::string, std::string> store_;
  bool shutdown_ = false;
};

}  // namespace shardlm
