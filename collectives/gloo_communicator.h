// Gloo (CPU, TCP) backend of the Communicator.
//
// Ranks meet through a key-value store (gloo::rendezvous::Store): in a
// deployment it is served by the coordinator (RendezvousStore over gRPC), in
// tests a gloo HashStore shared by threads. Every operation carries the
// context's timeout: a dead or stopped peer turns into DeadlineExceeded /
// Unavailable instead of a hang, after which the communicator is broken and
// says so on every call.
//
//   GlooOptions o{.hostname = "127.0.0.1", .timeout = std::chrono::seconds(10)};
//   SHARDLM_ASSIGN_OR_RETURN(auto comm, MakeGlooCommunicator({rank, world}, store, o));
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"

namespace gloo::rendezvous {
class Store;
}  // namespace gloo::rendezvous

namespace shardlm {

struct GlooOptions {
  std::string hostname = "127.0.0.1";  // interface this rank listens on
  std::chrono::milliseconds timeout{10000};
  std::string prefix = "shardlm";  // namespaces keys in a shared store
};

absl::StatusOr<std::unique_ptr<Communicator>> MakeGlooCommunicator(
    RankInfo rank, std::shared_ptr<gloo::rendezvous::Store> store, const GlooOptions& options);

}  // namespace shardlm
