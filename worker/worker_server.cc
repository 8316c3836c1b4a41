#include "worker/worker_server.h"

#include <ATen/Parallel.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "collectives/cuda_communicator.h"
#include "collectives/gloo_communicator.h"
#include "collectives/host_staged_communicator.h"
#include "collectives/shm_communicator.h"
#include "common/grpc_security.h"
#include "common/grpc_status.h"
#include "common/health_service.h"
#include "common/logging.h"
#include "formats/fingerprint.h"
#include "model/device.h"
#include "proto/step_codec.h"
#include "proto/worker_protocol.h"
#include "shardlm/worker/v1/worker.grpc.pb.h"
#include "step/step_masks.h"
#include "worker/compute_thread.h"
#include "worker/rank_worker.h"
#include "worker/remote_store.h"
#include "worker/timed_communicator.h"
#include "worker/worker_service.h"

namespace shardlm {
namespace {

using Clock = std::chrono::steady_clock;

// The coordinator's current epoch and process id, or nullopt when it did not answer.
std::optional<wpb::HeartbeatResponse> Heartbeat(wpb::Rendezvous::Stub& stub, const std::string& token,
                                                int rank, uint64_t epoch) {
  grpc::ClientContext ctx;
  AttachInternalToken(ctx, token);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  wpb::HeartbeatRequest req;
  req.set_rank(rank);
  req.set_epoch(epoch);
  wpb::HeartbeatResponse resp;
  if (!stub.Heartbeat(&ctx, req, &resp).ok()) return std::nullopt;
  return resp;
}

// Sleeps `ms` unless asked to stop first; false when asked.
bool SleepUnlessStopped(const std::atomic<bool>* stop, int64_t ms) {
  for (int64_t t = 0; t < ms; t += 50) {
    if (stop->load()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return !stop->load();
}

// A channel state's name, for the worker's "cannot reach" lines.
const char* StateName(grpc_connectivity_state state) {
  switch (state) {
    case GRPC_CHANNEL_IDLE:
      return "idle";
    case GRPC_CHANNEL_CONNECTING:
      return "connecting";
    case GRPC_CHANNEL_READY:
      return "connected";
    case GRPC_CHANNEL_TRANSIENT_FAILURE:
      return "failing to connect (nothing listens there, or it refuses us)";
    case GRPC_CHANNEL_SHUTDOWN:
      return "shut down";
  }
  return "?";
}

// Waits until the coordinator's endpoint accepts a connection or `deadline`
// passes, saying at once and then every 5 s what it is waiting for, so that a
// worker pointed at a wrong address is not silent (Register alone waits for
// the whole deadline and then says only "Deadline Exceeded"). False when it
// never connected (the error names the address, the time and the last state)
// or when asked to stop.
bool WaitForCoordinator(grpc::Channel& channel, const WorkerProcessOptions& options,
                        std::chrono::system_clock::time_point deadline, const std::atomic<bool>* stop,
                        std::string* error) {
  const auto start = std::chrono::steady_clock::now();
  auto next_say = start;
  bool said = false;
  while (!stop->load()) {
    grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
    if (state == GRPC_CHANNEL_READY) {
      if (said)
        LOG(WARNING) << "worker rank " << options.rank << ": reached the coordinator at "
                     << options.coordinator;
      return true;
    }
    const auto now = std::chrono::system_clock::now();
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (now >= deadline) {
      *error = absl::StrCat("could not reach the coordinator at ", options.coordinator, " in ",
                            static_cast<int>(waited), " s (--register-timeout-ms): the channel was ",
                            StateName(state));
      return false;
    }
    if ((state == GRPC_CHANNEL_TRANSIENT_FAILURE || waited >= 1.0) &&
        std::chrono::steady_clock::now() >= next_say) {
      next_say = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      LOG(WARNING) << "worker rank " << options.rank << ": cannot reach the coordinator at "
                   << options.coordinator << " yet (" << static_cast<int>(waited) << " s): the channel is "
                   << StateName(state) << "; retrying until the registration deadline";
      said = true;
    }
    channel.WaitForStateChange(state, std::min(deadline, now + std::chrono::seconds(1)));
  }
  return false;
}

}  // namespace

absl::StatusOr<int> OrdinalFromHostname(const std::string& hostname) {
  const size_t dash = hostname.rfind('-');
  const std::string digits = dash == std::string::npos ? "" : hostname.substr(dash + 1);
  if (digits.empty() || digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos) {
    return absl::InvalidArgumentError("hostname '" + hostname +
                                      "' does not end in a pod ordinal (-N); pass --rank");
  }
  return std::stoi(digits);
}

namespace {

// What a part of the worker's life says the process should do next.
enum class Next {
  kGo,     // on to the next part
  kAgain,  // register again (a new group formation)
  kStop,   // stop serving, exit 0 (asked to stop, or the coordinator is gone)
  kFail,   // exit 1 (a restart is the way back)
};

// One worker process: its server, then per group formation (epoch) register,
// make the communicator, load the shard (first time) or regroup (after), and
// serve the epoch.
class WorkerProcess {
 public:
  WorkerProcess(const WorkerProcessOptions& options, const std::atomic<bool>* stop)
      : options_(options), stop_(stop) {}

  int Run() {
    if (!Start()) return 1;
    int exit_code = 0;
    while (!stop_->load()) {
      wpb::RegisterResponse assigned;
      Next next = Register(&assigned);
      const RankInfo rank{assigned.rank(), assigned.world_size()};
      std::unique_ptr<Communicator> comm;
      if (next == Next::kGo) next = MakeCommunicatorFor(rank, assigned, &comm);
      if (next == Next::kGo) next = LoadOrRegroup(rank, assigned, std::move(comm));
      if (next == Next::kGo) next = ServeEpoch(rank, assigned);
      if (next == Next::kAgain) continue;
      if (next == Next::kFail) exit_code = 1;
      break;
    }
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    return exit_code;
  }

 private:
  // The fingerprint, the device, the Worker server and the channel to the
  // coordinator; false (logged) when any is missing.
  bool Start() {
    auto fingerprint = ModelFingerprint(options_.model_dir);
    if (!fingerprint.ok()) {
      LOG(ERROR) << "worker: " << fingerprint.status();
      return false;
    }
    // The device is settled before anything starts: a GPU that is not there
    // is a start-up error, not a failed group.
    auto device = ResolveDevice(options_.device, options_.rank);
    if (!device.ok()) {
      LOG(ERROR) << "worker rank " << options_.rank << ": " << device.status().message();
      return false;
    }
    device_ = *device;
    service_ = std::make_unique<WorkerService>(*fingerprint, options_.internal_token);
    grpc::ServerBuilder builder;
    builder.AddListeningPort(
        options_.listen,
        options_.server_credentials ? options_.server_credentials : grpc::InsecureServerCredentials(),
        &port_);
    builder.RegisterService(service_.get());
    // For Kubernetes probes, without the internal token: "" is SERVING while
    // this rank is in a formed group, "liveness" while the process answers.
    health_ = std::make_unique<HealthService>([this] { return service_->Ready(); });
    builder.RegisterService(health_.get());
    builder.SetMaxReceiveMessageSize(256 << 20);
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    server_ = builder.BuildAndStart();
    if (!server_ || port_ == 0) {
      LOG(ERROR) << "worker: cannot listen on " << options_.listen;
      return false;
    }
    channel_ = grpc::CreateCustomChannel(
        options_.coordinator,
        options_.channel_credentials ? options_.channel_credentials : grpc::InsecureChannelCredentials(),
        InternalChannelArguments());
    stub_ = std::shared_ptr<wpb::Rendezvous::Stub>(wpb::Rendezvous::NewStub(channel_));
    reg_.set_protocol_version(kWorkerProtocolVersion);
    reg_.set_worker_address(absl::StrCat(options_.advertise_host, ":", port_));
    // The bound port (--listen may name port 0), for operators and probes.
    LOG(INFO) << "worker listening on " << options_.listen.substr(0, options_.listen.rfind(':')) << ":"
              << port_ << ", registering as " << reg_.worker_address();
    reg_.set_model_fingerprint(*fingerprint);
    reg_.set_rank(options_.rank);
    return true;
  }

  // Waits for the coordinator to come up and for every rank to join.
  Next Register(wpb::RegisterResponse* assigned) {
    grpc::Status st;
    const auto deadline =
        std::chrono::system_clock::now() + std::chrono::milliseconds(options_.register_timeout_ms);
    if (std::string unreachable; !WaitForCoordinator(*channel_, options_, deadline, stop_, &unreachable)) {
      if (stop_->load()) return Next::kStop;
      st = grpc::Status(grpc::StatusCode::UNAVAILABLE, unreachable);
    } else {
      grpc::ClientContext ctx;
      AttachInternalToken(ctx, options_.internal_token);
      ctx.set_wait_for_ready(true);
      ctx.set_deadline(deadline);
      st = stub_->Register(&ctx, reg_, assigned);
    }
    if (st.ok()) {
      LOG(INFO) << "worker rank " << assigned->rank() << "/" << assigned->world_size() << " joined epoch "
                << assigned->epoch() << ", serving on port " << port_;
      return Next::kGo;
    }
    const bool retry = st.error_code() == grpc::StatusCode::UNAVAILABLE ||
                       st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    LOG(ERROR) << "worker rank " << options_.rank << ": registration with " << options_.coordinator
               << " failed: " << st.error_message();
    if (!retry || worker_ == nullptr) return Next::kFail;  // a first registration that fails ends the process
    return SleepUnlessStopped(stop_, 500) ? Next::kAgain : Next::kStop;
  }

  // The group's collectives: none at world size 1, NCCL between GPUs, Gloo
  // (or shared memory on one host) otherwise.
  Next MakeCommunicatorFor(const RankInfo& rank, const wpb::RegisterResponse& assigned,
                           std::unique_ptr<Communicator>* out) {
    const auto store_timeout = std::chrono::milliseconds(options_.register_timeout_ms);
    const auto collective_timeout = std::chrono::milliseconds(assigned.collective_timeout_ms());
    if (rank.world_size == 1 && !(device_.is_cuda() && options_.nccl_at_world_size_one)) {
      *out = MakeSingleRankCommunicator();
      return Next::kGo;
    }
    if (device_.is_cuda() && !options_.host_staged_collectives) {
      // GPU ranks: NCCL, bootstrapped through the coordinator's store.
      auto store = std::make_shared<RemoteStore>(stub_, options_.internal_token, assigned.store_prefix(),
                                                 store_timeout);
      auto comm = MakeCudaCommunicator(rank, store, device_.index(), collective_timeout);
      if (!comm.ok()) {
        LOG(ERROR) << "worker rank " << rank.rank << ": " << comm.status();
        service_->SetNotReady(comm.status());
        // This build has no NCCL: retrying cannot help.
        if (comm.status().code() == absl::StatusCode::kFailedPrecondition) return Next::kFail;
        return SleepUnlessStopped(stop_, 200) ? Next::kAgain : Next::kStop;
      }
      *out = std::move(*comm);
      LOG(INFO) << "worker rank " << rank.rank << ": collectives over NCCL on " << device_.str();
      return Next::kGo;
    }
    GlooOptions gloo;
    gloo.hostname =
        assigned.collective_hostname().empty() ? options_.advertise_host : assigned.collective_hostname();
    gloo.timeout = collective_timeout;
    gloo.prefix = assigned.store_prefix();
    auto store = std::make_shared<RemoteStore>(stub_, options_.internal_token, "", store_timeout);
    auto comm = MakeGlooCommunicator(rank, store, gloo);
    if (!comm.ok()) {
      // The group broke again while forming: register anew.
      LOG(ERROR) << "worker rank " << rank.rank << ": " << comm.status();
      service_->SetNotReady(comm.status());
      return SleepUnlessStopped(stop_, 200) ? Next::kAgain : Next::kStop;
    }
    std::unique_ptr<Communicator> inner = std::move(*comm);
    if (options_.shared_memory_collectives) {
      ShmOptions shm;
      shm.prefix = gloo.prefix;
      shm.timeout = gloo.timeout;
      inner = MaybeUseSharedMemory(rank, *store, std::move(inner), shm);
    }
    const bool shm = IsSharedMemory(*inner);
    if (device_.is_cuda()) inner = MakeHostStagedCommunicator(std::move(inner));
    LOG(INFO) << "worker rank " << rank.rank << ": collectives over " << (shm ? "shared memory" : "Gloo")
              << (device_.is_cuda() ? ", staged through host memory" : "");
    *out = std::move(inner);
    return Next::kGo;
  }

  // The first epoch loads this rank's shard; a later one keeps it and only
  // swaps the communicator and clears the KV pool.
  Next LoadOrRegroup(const RankInfo& rank, const wpb::RegisterResponse& assigned,
                     std::unique_ptr<Communicator> inner) {
    if (worker_ == nullptr) {
      auto timed_comm = std::make_unique<TimedCommunicator>(std::move(inner));
      timed_ = timed_comm.get();
      RankWorkerOptions wo;
      wo.model_dir = options_.model_dir;
      // The coordinator's settings, in its flags' words, parsed here once.
      absl::Status storage =
          SetRankStorage(assigned.dtype(), assigned.weights().empty() ? "auto" : assigned.weights(),
                         assigned.kv_dtype().empty() ? "auto" : assigned.kv_dtype(), &wo);
      wo.kv_cache_bytes = assigned.kv_cache_bytes();
      wo.block_size = assigned.block_size();
      wo.device = device_;
      // A host-staged collective copies to the host mid-step: no graph can capture it.
      wo.cuda_graph_max_batch = options_.host_staged_collectives ? 0 : options_.cuda_graph_max_batch;
      wo.warmup_tokens = options_.warmup_tokens;
      absl::StatusOr<std::unique_ptr<RankWorker>> loaded = absl::InternalError("not loaded");
      if (storage.ok()) {
        service_->RunCompute([&] { loaded = RankWorker::Load(wo, std::move(timed_comm)); });
      } else {
        loaded = storage;
      }
      if (!loaded.ok()) {
        LOG(ERROR) << "worker rank " << rank.rank << ": " << loaded.status();
        service_->SetNotReady(loaded.status());
        // Stay up briefly so the coordinator's handshake can read the error.
        SleepUnlessStopped(stop_, 5000);
        return Next::kFail;
      }
      worker_ = std::move(*loaded);
    } else {
      const RankInfo had = worker_->model().plan().rank();
      if (had.rank != rank.rank || had.world_size != rank.world_size) {
        LOG(ERROR) << "worker: the coordinator now wants rank " << rank.rank << " of " << rank.world_size
                   << ", this process holds the shard of rank " << had.rank << " of " << had.world_size
                   << "; exiting so it can be restarted";
        return Next::kFail;
      }
      absl::Status regrouped;
      service_->Exclusive([&] {
        // The graphs hold the old communicator's collectives; NCCL's destroy
        // (in Reset) waits until they are gone.
        service_->RunCompute([&] { worker_->DropGraphs(); });
        timed_->Reset(std::move(inner));
        service_->RunCompute([&] { regrouped = worker_->Regroup(); });
      });
      if (!regrouped.ok()) {
        // The pool could not be cleared: a fresh process is the clean way back.
        LOG(ERROR) << "worker rank " << rank.rank << ": " << regrouped;
        service_->SetNotReady(regrouped);
        SleepUnlessStopped(stop_, 5000);
        return Next::kFail;
      }
    }
    service_->SetReady(worker_.get(), timed_, assigned.kv_cache_bytes(), assigned.epoch());
    return Next::kGo;
  }

  // Serves until the epoch moves on (kAgain), a stop request or the
  // coordinator going away (kStop).
  Next ServeEpoch(const RankInfo& rank, const wpb::RegisterResponse& assigned) {
    const uint64_t epoch = assigned.epoch();
    auto last_seen = Clock::now();
    while (SleepUnlessStopped(stop_, 500)) {
      auto current = Heartbeat(*stub_, options_.internal_token, rank.rank, epoch);
      if (!current.has_value()) {
        if (Clock::now() - last_seen > std::chrono::milliseconds(options_.coordinator_lost_ms)) {
          LOG(WARNING) << "worker rank " << rank.rank << ": coordinator " << options_.coordinator
                       << " unreachable; exiting";
          return Next::kStop;
        }
        continue;
      }
      last_seen = Clock::now();
      // A new epoch, or a new coordinator process (which may count epochs
      // from 1 again): either way this group is gone.
      if (current->epoch() != epoch || current->coordinator_id() != assigned.coordinator_id()) {
        LOG(WARNING) << "worker rank " << rank.rank << ": the group of epoch " << epoch
                     << " was dissolved; registering again";
        service_->MarkLeaving(epoch);
        service_->SetNotReady(
            absl::UnavailableError(absl::StrCat("rank ", rank.rank, " is rejoining the group")));
        return Next::kAgain;
      }
    }
    return Next::kStop;
  }

  const WorkerProcessOptions& options_;
  const std::atomic<bool>* stop_;
  at::Device device_{at::kCPU};
  std::unique_ptr<WorkerService> service_;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::shared_ptr<wpb::Rendezvous::Stub> stub_;
  wpb::RegisterRequest reg_;
  std::unique_ptr<RankWorker> worker_;  // loaded once; kept across epochs
  TimedCommunicator* timed_ = nullptr;  // owned by worker_
};

}  // namespace

int RunWorkerProcess(const WorkerProcessOptions& options, const std::atomic<bool>* stop) {
  return WorkerProcess(options, stop).Run();
}

}  // namespace shardlm
