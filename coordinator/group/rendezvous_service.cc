#include "coordinator/group/rendezvous_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/grpc_security.h"
#include "common/logging.h"
#include "common/random_token.h"
#include "proto/worker_protocol.h"

namespace shardlm {

namespace wpb = ::shardlm::worker::v1;

namespace {
constexpr size_t kMaxStoreKeys = 4096;           // a group needs a few per rank and epoch
constexpr size_t kMaxStoreValueBytes = 1 << 20;  // addresses and ids are small
}  // namespace

RendezvousService::RendezvousService(int world_size, std::string fingerprint, wpb::RegisterResponse settings,
                                     std::string token)
    : world_size_(world_size),
      fingerprint_(std::move(fingerprint)),
      settings_(std::move(settings)),
      token_(std::move(token)),
      id_(RandomToken(8)),
      slots_(world_size) {}

void RendezvousService::SetMemberAliveProbe(std::function<bool(int)> probe) {
  std::lock_guard<std::mutex> lock(mu_);
  member_alive_ = std::move(probe);
}

grpc::Status RendezvousService::Register(grpc::ServerContext* ctx, const wpb::RegisterRequest* req,
                                         wpb::RegisterResponse* resp) {
  if (!HasInternalToken(*ctx, token_)) return InternalTokenDenied();
  if (req->protocol_version() != kWorkerProtocolVersion) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("worker protocol version ", req->protocol_version(),
                                     " != coordinator's ", kWorkerProtocolVersion));
  }
  if (req->model_fingerprint() != fingerprint_) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "worker model fingerprint " + req->model_fingerprint().substr(0, 64) +
                            " != coordinator's " + fingerprint_ + " (different config.json or tensors)");
  }
  const int rank = req->rank();
  if (rank < 0 || rank >= world_size_) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("rank ", rank, " is outside the group: --tp is ", world_size_,
                                     ", so ranks are 0..", world_size_ - 1));
  }
  const std::string address = req->worker_address().substr(0, 256);
  std::unique_lock<std::mutex> lock(mu_);
  if (formed_ && slots_[rank]->address != address) {
    // A newcomer for a rank of the running group: a duplicate while the
    // holder answers, else a restarted worker whose predecessor died.
    const std::string holder = slots_[rank]->address;
    auto probe = member_alive_;
    lock.unlock();
    const bool alive = probe && probe(rank);
    lock.lock();
    if (alive && formed_ && slots_[rank]->address == holder) {
      return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                          absl::StrCat("rank ", rank, " is already held by the live worker at ", holder, "; ",
                                       address, " cannot claim it too"));
    }
    LOG(WARNING) << "rank " << rank << " member " << holder << " is gone; " << address << " replaces it";
  }
  // Still formed: a replacement (above), or a member registering again (a
  // restarted worker on the same address). Either way the group re-forms.
  if (formed_) BeginEpochLocked();
  if (slots_[rank].has_value() && slots_[rank]->address != address) {
    return grpc::Status(
        grpc::StatusCode::ALREADY_EXISTS,
        absl::StrCat("two workers claim rank ", rank, ": ", slots_[rank]->address, " (registered first) and ",
                     address, "; give each worker its own --rank"));
  }
  const uint64_t epoch = epoch_;
  const uint64_t ticket = next_ticket_++;
  slots_[rank] = Claim{address, ticket};
  const int joined =
      static_cast<int>(std::count_if(slots_.begin(), slots_.end(), [](auto& s) { return s.has_value(); }));
  LOG(INFO) << "worker " << address << " registered for rank " << rank << " of epoch " << epoch << " ("
            << joined << " of " << world_size_ << ")";
  if (joined == world_size_) formed_ = true;
  cv_.notify_all();
  // Reply once the group is complete, so every rank starts its bootstrap together.
  auto mine = [&] { return epoch_ == epoch && slots_[rank].has_value() && slots_[rank]->ticket == ticket; };
  while (mine() && !formed_ && !shutdown_ && !ctx->IsCancelled()) {
    cv_.wait_for(lock, std::chrono::milliseconds(200));
  }
  if (!mine()) {
    return grpc::Status(
        grpc::StatusCode::UNAVAILABLE,
        absl::StrCat("the group of epoch ", epoch, " was dissolved while forming; register again"));
  }
  if (!formed_) {
    // Gave up (its deadline, or shutdown) before the group completed: free the slot.
    slots_[rank].reset();
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "the group did not complete before this worker gave up");
  }
  *resp = settings_;
  resp->set_rank(rank);
  resp->set_world_size(world_size_);
  resp->set_epoch(epoch);
  resp->set_store_prefix(absl::StrCat(settings_.store_prefix(), "-epoch", epoch));
  resp->set_coordinator_id(id_);
  return grpc::Status::OK;
}

grpc::Status RendezvousService::StoreSet(grpc::ServerContext* ctx, const wpb::StoreSetRequest* req,
                                         wpb::StoreSetResponse*) {
  if (!HasInternalToken(*ctx, token_)) return InternalTokenDenied();
  if (req->value().size() > kMaxStoreValueBytes || req->key().size() > 1024) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("store entries are limited to 1024-byte keys and ", kMaxStoreValueBytes,
                                     "-byte values"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (store_.size() >= kMaxStoreKeys && !store_.count(req->key())) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat("the rendezvous store holds its maximum of ", kMaxStoreKeys, " keys"));
  }
  store_[req->key()] = req->value();
  cv_.notify_all();
  return grpc::Status::OK;
}

grpc::Status RendezvousService::StoreGet(grpc::ServerContext* ctx, const wpb::StoreGetRequest* req,
                                         wpb::StoreGetResponse* resp) {
  if (!HasInternalToken(*ctx, token_)) return InternalTokenDenied();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(req->timeout_ms());
  std::unique_lock<std::mutex> lock(mu_);
  while (!store_.count(req->key())) {
    if (shutdown_ || ctx->IsCancelled() || std::chrono::steady_clock::now() >= deadline) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          "store key '" + req->key().substr(0, 128) + "' never set");
    }
    cv_.wait_for(lock, std::chrono::milliseconds(100));
  }
  resp->set_value(store_[req->key()]);
  return grpc::Status::OK;
}

grpc::Status RendezvousService::Heartbeat(grpc::ServerContext* ctx, const wpb::HeartbeatRequest*,
                                          wpb::HeartbeatResponse* resp) {
  if (!HasInternalToken(*ctx, token_)) return InternalTokenDenied();
  std::lock_guard<std::mutex> lock(mu_);
  resp->set_epoch(epoch_);
  resp->set_coordinator_id(id_);
  return grpc::Status::OK;
}

absl::StatusOr<FormedGroup> RendezvousService::WaitForGroup(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return formed_ || shutdown_; });
  if (shutdown_) return absl::CancelledError("shutting down");
  if (!formed_) {
    std::vector<int> missing;
    for (int r = 0; r < world_size_; ++r) {
      if (!slots_[r].has_value()) missing.push_back(r);
    }
    return absl::DeadlineExceededError(absl::StrCat(world_size_ - missing.size(), " of ", world_size_,
                                                    " workers registered within ", timeout.count(),
                                                    " ms; missing rank(s) ", absl::StrJoin(missing, ", ")));
  }
  FormedGroup g;
  g.epoch = epoch_;
  for (const auto& s : slots_) g.addresses.push_back(s->address);
  return g;
}

uint64_t RendezvousService::BeginEpoch() {
  std::lock_guard<std::mutex> lock(mu_);
  return BeginEpochLocked();
}

bool RendezvousService::BeginEpochIfCurrent(uint64_t epoch) {
  std::lock_guard<std::mutex> lock(mu_);
  if (epoch_ != epoch) return false;
  BeginEpochLocked();
  return true;
}

uint64_t RendezvousService::BeginEpochLocked() {
  ++epoch_;
  formed_ = false;
  for (auto& s : slots_) s.reset();
  // Keys of earlier epochs are never read again.
  store_.clear();
  cv_.notify_all();
  LOG(WARNING) << "tensor-parallel group dissolved; forming epoch " << epoch_;
  return epoch_;
}

void RendezvousService::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  cv_.notify_all();
}

}  // namespace shardlm
