#include "coordinator/rendezvous_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "worker/worker_server.h"

namespace shardlm {

namespace wpb = ::shardlm::worker::v1;

RendezvousService::RendezvousService(int world_size, std::string fingerprint, wpb::RegisterResponse settings)
    : world_size_(world_size), fingerprint_(std::move(fingerprint)), settings_(std::move(settings)) {}

grpc::Status RendezvousService::Register(grpc::ServerContext* ctx, const wpb::RegisterRequest* req,
                                         wpb::RegisterResponse* resp) {
  if (req->protocol_version() != kWorkerProtocolVersion) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("worker protocol version ", req->protocol_version(),
                                     " != coordinator's ", kWorkerProtocolVersion));
  }
  if (req->model_fingerprint() != fingerprint_) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "worker model fingerprint " + req->model_fingerprint() + " != coordinator's " +
                            fingerprint_ + " (different config.json or tensors)");
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (static_cast<int>(addresses_.size()) >= world_size_) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("all ", world_size_, " ranks have already joined"));
  }
  const uint64_t ticket = next_ticket_++;
  tickets_.push_back(ticket);
  addresses_.push_back(req->worker_address());
  LOG(INFO) << "worker " << req->worker_address() << " joined (" << addresses_.size() << " of " << world_size_
            << ")";
  cv_.notify_all();
  // Reply once the group is complete, so every rank starts its bootstrap together.
  while (static_cast<int>(addresses_.size()) < world_size_ && !shutdown_ && !ctx->IsCancelled()) {
    cv_.wait_for(lock, std::chrono::milliseconds(200));
  }
  // Ranks are the order of arrival among the workers still waiting, fixed
  // only once the group is complete.
  const int rank = static_cast<int>(std::find(tickets_.begin(), tickets_.end(), ticket) - tickets_.begin());
  if (static_cast<int>(addresses_.size()) < world_size_) {
    // Gave up (its deadline, or shutdown) before the group completed: free the slot.
    tickets_.erase(tickets_.begin() + rank);
    addresses_.erase(addresses_.begin() + rank);
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "the group did not complete before this worker gave up");
  }
  *resp = settings_;
  resp->set_rank(rank);
  resp->set_world_size(world_size_);
  return grpc::Status::OK;
}

grpc::Status RendezvousService::StoreSet(grpc::ServerContext*, const wpb::StoreSetRequest* req,
                                         wpb::StoreSetResponse*) {
  std::lock_guard<std::mutex> lock(mu_);
  store_[req->key()] = req->value();
  cv_.notify_all();
  return grpc::Status::OK;
}

grpc::Status RendezvousService::StoreGet(grpc::ServerContext* ctx, const wpb::StoreGetRequest* req,
                                         wpb::StoreGetResponse* resp) {
  if (req->key().empty()) return grpc::Status::OK;  // liveness ping from workers
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(req->timeout_ms());
  std::unique_lock<std::mutex> lock(mu_);
  while (!store_.count(req->key())) {
    if (shutdown_ || ctx->IsCancelled() || std::chrono::steady_clock::now() >= deadline) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "store key '" + req->key() + "' never set");
    }
    cv_.wait_for(lock, std::chrono::milliseconds(100));
  }
  resp->set_value(store_[req->key()]);
  return grpc::Status::OK;
}

absl::StatusOr<std::vector<std::string>> RendezvousService::WaitForWorkers(
    std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout,
                    [&] { return static_cast<int>(addresses_.size()) >= world_size_ || shutdown_; }) ||
      static_cast<int>(addresses_.size()) < world_size_) {
    return absl::DeadlineExceededError(absl::StrCat(addresses_.size(), " of ", world_size_,
                                                    " workers registered within ", timeout.count(), " ms"));
  }
  return addresses_;
}

void RendezvousService::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  cv_.notify_all();
}

}  // namespace shardlm
