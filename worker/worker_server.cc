#include "worker/worker_server.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "collectives/gloo_communicator.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "model/fingerprint.h"
#include "shardlm/worker/v1/worker.grpc.pb.h"
#include "worker/rank_worker.h"
#include "worker/remote_store.h"
#include "worker/step_codec.h"
#include "worker/timed_communicator.h"

namespace shardlm {
namespace {

using Clock = std::chrono::steady_clock;

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

class WorkerService final : public wpb::Worker::Service {
 public:
  explicit WorkerService(std::string fingerprint) : fingerprint_(std::move(fingerprint)) {}

  void SetReady(std::unique_ptr<RankWorker> worker, TimedCommunicator* comm, int64_t kv_bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    worker_ = std::move(worker);
    comm_ = comm;
    kv_bytes_ = kv_bytes;
  }
  void SetFailed(absl::Status st) {
    std::lock_guard<std::mutex> lock(mu_);
    failed_ = std::move(st);
  }

  grpc::Status Handshake(grpc::ServerContext*, const wpb::HandshakeRequest* req,
                         wpb::HandshakeResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (req->protocol_version() != kWorkerProtocolVersion) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat("worker protocol version ", kWorkerProtocolVersion,
                                       ", coordinator speaks ", req->protocol_version()));
    }
    if (req->model_fingerprint() != fingerprint_) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "model fingerprint " + fingerprint_ +
                                                                     " differs from the coordinator's " +
                                                                     req->model_fingerprint());
    }
    if (!failed_.ok()) return ToGrpcStatus(failed_);
    if (!worker_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker is loading its shard");
    const RankInfo rank = worker_->model().plan().rank();
    resp->set_rank(rank.rank);
    resp->set_world_size(rank.world_size);
    resp->set_num_blocks(worker_->num_blocks());
    resp->set_block_size(worker_->block_size());
    resp->set_weight_bytes(worker_->model().weight_bytes());
    resp->set_kv_cache_bytes(kv_bytes_);
    resp->set_resident_bytes(ResidentBytes());
    return grpc::Status::OK;
  }

  grpc::Status Step(grpc::ServerContext*, const wpb::StepRequest* req, wpb::StepResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_.ok()) return ToGrpcStatus(failed_);
    if (!worker_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker is loading its shard");
    const auto start = Clock::now();
    const ModelConfig& cfg = worker_->config();
    StepLimits limits{cfg.vocab_size, worker_->num_blocks(), worker_->block_size(),
                      cfg.max_position_embeddings};
    auto decoded = DecodeStep(*req, limits);
    if (!decoded.ok()) return ToGrpcStatus(decoded.status());
    comm_->TakeMicros();
    auto rows = worker_->Execute((*decoded)->step);
    if (!rows.ok()) {
      // A failed collective leaves the group in an unknown state: stay failed.
      failed_ = absl::UnavailableError(
          absl::StrCat("rank ", worker_->model().plan().rank().rank, ": ", rows.status().message()));
      return ToGrpcStatus(failed_);
    }
    EncodeRows(*rows, resp);
    resp->mutable_timing()->set_collective_us(comm_->TakeMicros());
    resp->mutable_timing()->set_total_us(
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
    return grpc::Status::OK;
  }

  grpc::Status Health(grpc::ServerContext*, const wpb::HealthRequest*, wpb::HealthResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu_);
    resp->set_ready(worker_ != nullptr && failed_.ok());
    resp->set_status(!failed_.ok() ? std::string(failed_.message()) : worker_ ? "ready" : "loading");
    return grpc::Status::OK;
  }

 private:
  std::mutex mu_;  // one step at a time
  std::string fingerprint_;
  std::unique_ptr<RankWorker> worker_;
  TimedCommunicator* comm_ = nullptr;
  int64_t kv_bytes_ = 0;
  absl::Status failed_;
};

// True while the coordinator answers a ping (a StoreGet of the empty key).
bool CoordinatorAlive(wpb::Rendezvous::Stub& stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  wpb::StoreGetRequest req;
  wpb::StoreGetResponse resp;
  return stub.StoreGet(&ctx, req, &resp).ok();
}

}  // namespace

int RunWorkerProcess(const WorkerProcessOptions& options, const std::atomic<bool>* stop) {
  auto fingerprint = ModelFingerprint(options.model_dir);
  if (!fingerprint.ok()) {
    LOG(ERROR) << "worker: " << fingerprint.status();
    return 1;
  }
  WorkerService service(*fingerprint);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(256 << 20);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    LOG(ERROR) << "worker: cannot listen on " << options.listen;
    return 1;
  }
  auto channel = grpc::CreateChannel(options.coordinator, grpc::InsecureChannelCredentials());
  auto stub = std::shared_ptr<wpb::Rendezvous::Stub>(wpb::Rendezvous::NewStub(channel));

  // Register: waits for the coordinator to come up and for every rank to join.
  wpb::RegisterRequest reg;
  reg.set_protocol_version(kWorkerProtocolVersion);
  reg.set_worker_address(absl::StrCat(options.advertise_host, ":", port));
  reg.set_model_fingerprint(*fingerprint);
  wpb::RegisterResponse assigned;
  {
    grpc::ClientContext ctx;
    ctx.set_wait_for_ready(true);
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(options.register_timeout_ms));
    grpc::Status st = stub->Register(&ctx, reg, &assigned);
    if (!st.ok()) {
      LOG(ERROR) << "worker: registration with " << options.coordinator << " failed: " << st.error_message();
      server->Shutdown();
      return 1;
    }
  }
  const RankInfo rank{assigned.rank(), assigned.world_size()};
  LOG(INFO) << "worker rank " << rank.rank << "/" << rank.world_size << " serving on port " << port;

  std::unique_ptr<Communicator> inner;
  if (rank.world_size == 1) {
    inner = MakeSingleRankCommunicator();
  } else {
    GlooOptions gloo;
    gloo.hostname =
        assigned.collective_hostname().empty() ? options.advertise_host : assigned.collective_hostname();
    gloo.timeout = std::chrono::milliseconds(assigned.collective_timeout_ms());
    gloo.prefix = assigned.store_prefix();
    auto store =
        std::make_shared<RemoteStore>(stub, "", std::chrono::milliseconds(options.register_timeout_ms));
    auto comm = MakeGlooCommunicator(rank, store, gloo);
    if (!comm.ok()) {
      LOG(ERROR) << "worker rank " << rank.rank << ": " << comm.status();
      service.SetFailed(comm.status());
      server->Shutdown();
      return 1;
    }
    inner = std::move(*comm);
  }
  auto timed = std::make_unique<TimedCommunicator>(std::move(inner));
  TimedCommunicator* timed_ptr = timed.get();
  RankWorkerOptions wo;
  wo.model_dir = options.model_dir;
  wo.dtype = assigned.dtype();
  wo.kv_cache_bytes = assigned.kv_cache_bytes();
  wo.block_size = assigned.block_size();
  auto worker = RankWorker::Load(wo, std::move(timed));
  if (!worker.ok()) {
    LOG(ERROR) << "worker rank " << rank.rank << ": " << worker.status();
    service.SetFailed(worker.status());
    // Stay up briefly so the coordinator's handshake can read the error.
    for (int i = 0; i < 50 && !stop->load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    server->Shutdown();
    return 1;
  }
  service.SetReady(std::move(*worker), timed_ptr, wo.kv_cache_bytes);

  // Watch for a stop request or the coordinator going away.
  auto last_seen = Clock::now();
  while (!stop->load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    if (CoordinatorAlive(*stub)) {
      last_seen = Clock::now();
    } else if (Clock::now() - last_seen > std::chrono::milliseconds(options.coordinator_lost_ms)) {
      LOG(WARNING) << "worker rank " << rank.rank << ": coordinator " << options.coordinator
                   << " unreachable; exiting";
      break;
    }
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}

}  // namespace shardlm
