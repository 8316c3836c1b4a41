#include "coordinator/group/worker_group.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/health_service.h"
#include "common/logging.h"
#include "common/status.h"
#include "coordinator/group/rendezvous_service.h"
#include "formats/fingerprint.h"

namespace shardlm {
namespace {

constexpr auto kProbeTimeout = std::chrono::milliseconds(2000);

}  // namespace

// The rendezvous (with the settings every rank is given) and the health
// service on one gRPC server at options.listen; endpoint_ is where workers
// reach it.
absl::Status WorkerGroup::Listen() {
  const WorkerGroupOptions& options = options_;
  ::shardlm::worker::v1::RegisterResponse settings;
  settings.set_store_prefix(absl::StrCat("group-", getpid(), "-", fingerprint_));
  settings.set_dtype(options.dtype);
  settings.set_weights(options.weights);
  settings.set_kv_dtype(options.kv_dtype);
  settings.set_kv_cache_bytes(options.kv_cache_bytes);
  settings.set_block_size(options.block_size);
  settings.set_collective_timeout_ms(options.collective_timeout_ms);
  rendezvous_ =
      std::make_unique<RendezvousService>(options.tp, fingerprint_, settings, options.internal_token);
  SHARDLM_ASSIGN_OR_RETURN(auto server_creds,
                           ServerCredentials(options.internal_tls, "--internal-tls", "--internal-tls-ca"));
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, server_creds, &port);
  builder.RegisterService(rendezvous_.get());
  // Probes of orchestrators (plaintext, no token): the group's state.
  health_ = std::make_unique<HealthService>([this] { return serving(); });
  builder.RegisterService(health_.get());
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.SetMaxReceiveMessageSize(4 << 20);
  server_ = builder.BuildAndStart();
  if (!server_ || port == 0) {
    return absl::UnavailableError("cannot listen for workers on " + options.listen +
                                  " (address in use or not local?)");
  }
  const std::string host = options.listen.substr(0, options.listen.rfind(':'));
  endpoint_ = absl::StrCat(host == "0.0.0.0" ? "127.0.0.1" : host, ":", port);
  return absl::OkStatus();
}

// The local worker processes (when this group spawns them), each given its
// share of the cores.
void WorkerGroup::StartLocalWorkers() {
  const WorkerGroupOptions& options = options_;
  LocalWorkerOptions lo;
  lo.exe = options.exe;
  lo.coordinator = endpoint_;
  lo.model_dir = options.model_dir;
  lo.tp = options.tp;
  lo.log_level = options.worker_log_level;
  lo.threads = options.worker_threads;
  lo.device = options.device;
  lo.cuda_graph_max_batch = options.cuda_graph_max_batch;
  lo.collectives = options.collectives;
  lo.warmup_tokens = options.warmup_tokens;
  lo.internal_token = options.internal_token;
  if (options.metrics) lo.restarted = [m = options.metrics] { m->group_restarts->Add(); };
  local_ = std::make_unique<LocalWorkers>(std::move(lo));
}

absl::StatusOr<std::unique_ptr<WorkerGroup>> WorkerGroup::Start(const WorkerGroupOptions& options) {
  if (options.tp < 1 || options.tp > 64) {
    return absl::InvalidArgumentError(absl::StrCat("--tp must be in [1, 64], got ", options.tp));
  }
  SHARDLM_ASSIGN_OR_RETURN(std::string fingerprint, ModelFingerprint(options.model_dir));
  std::unique_ptr<WorkerGroup> g(new WorkerGroup());
  g->options_ = options;
  g->fingerprint_ = fingerprint;
  SHARDLM_RETURN_IF_ERROR(g->Listen());
  SHARDLM_ASSIGN_OR_RETURN(g->exec_options_.credentials,
                           ChannelCredentials(options.internal_tls, "--internal-tls", "--internal-tls-ca"));
  if (g->options_.worker_threads <= 0) {
    // Local workers share this machine's cores.
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    g->options_.worker_threads = std::max(1, cores / options.tp);
  }
  g->exec_options_.handshake_timeout = std::chrono::milliseconds(options.start_timeout_ms);
  g->exec_options_.step_timeout = std::chrono::milliseconds(options.step_timeout_ms);
  g->exec_options_.step_timeout_per_token = std::chrono::milliseconds(options.step_timeout_per_token_ms);
  g->exec_options_.internal_token = options.internal_token;
  g->exec_options_.metrics = options.metrics;
  if (options.spawn_local) {
    g->StartLocalWorkers();
  } else {
    // The bound endpoint (--worker-listen may name port 0): where to point workers.
    std::fprintf(stderr, "waiting for %d workers at %s\n", options.tp, g->endpoint_.c_str());
  }
  // A newcomer for a formed group's rank: refused while the holder answers.
  WorkerGroup* self = g.get();
  g->rendezvous_->SetMemberAliveProbe([self](int rank) {
    std::shared_ptr<RemoteExecutor> exec;
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      exec = self->exec_;
    }
    if (!exec) return false;
    auto probes = exec->Probe(kProbeTimeout);
    return rank < static_cast<int>(probes.size()) && probes[rank].reachable;
  });
  SHARDLM_RETURN_IF_ERROR(g->Connect(std::chrono::milliseconds(options.start_timeout_ms)));
  g->supervisor_ = std::thread([self] { self->Supervise(); });
  return g;
}

absl::Status WorkerGroup::Connect(std::chrono::milliseconds timeout, uint64_t* tried) {
  auto formed = rendezvous_->WaitForGroup(timeout);
  if (!formed.ok()) return formed.status();
  if (tried != nullptr) *tried = formed->epoch;
  auto exec = RemoteExecutor::Connect(formed->addresses, formed->epoch, fingerprint_, exec_options_);
  if (!exec.ok()) return exec.status();
  std::lock_guard<std::mutex> lock(mu_);
  const bool first = state_.epoch == 0;
  exec_ = std::move(*exec);
  state_.serving = true;
  state_.epoch = formed->epoch;
  state_.num_blocks = exec_->num_blocks();
  state_.block_size = exec_->block_size();
  state_.failure = absl::OkStatus();
  if (ServiceMetrics* m = exec_options_.metrics) {
    m->group_epoch->Set(static_cast<double>(formed->epoch));
    m->group_serving->Set(1);
    if (!first) m->group_reforms->Add();
  }
  if (!first) {
    ++state_.restarts;
    LOG(WARNING) << "tensor-parallel group formed again (epoch " << formed->epoch << ", " << state_.num_blocks
                 << " KV blocks); serving";
  }
  serving_ = true;
  return absl::OkStatus();
}

GroupState WorkerGroup::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

RemoteExecutor* WorkerGroup::executor() {
  std::lock_guard<std::mutex> lock(mu_);
  return exec_.get();
}

absl::Status WorkerGroup::Diagnose(const std::vector<RankProbe>& probes) {
  // Name the ranks that did not answer first: a dead or stopped rank makes
  // its healthy peers' collectives fail too, and they are not the cause.
  std::vector<std::string> silent, unready;
  for (const RankProbe& p : probes) {
    if (!p.reachable)
      silent.push_back(p.detail);
    else if (!p.ready)
      unready.push_back(p.detail);
  }
  if (silent.empty() && unready.empty()) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("tensor-parallel group failed: ", absl::StrJoin(silent.empty() ? unready : silent, "; "),
                   "; the group is being formed again"));
}

absl::StatusOr<std::vector<RowResult>> WorkerGroup::Execute(const StepInput& step) {
  std::shared_ptr<RemoteExecutor> exec;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!state_.serving) return state_.failure;
    exec = exec_;
  }
  auto rows = exec->Execute(step);
  if (rows.ok()) return rows;
  return Judge(*exec, rows.status());
}

absl::Status WorkerGroup::Judge(RemoteExecutor& exec, absl::Status failed) {
  // Did the failure break the group, or only this step?
  absl::Status broken = Diagnose(exec.Probe(kProbeTimeout));
  if (broken.ok()) return failed;
  MarkBroken(exec.epoch(), broken);
  return broken;
}

std::unique_ptr<PendingStep> WorkerGroup::StartStep(const StepInput& step) {
  class Failed final : public PendingStep {
   public:
    explicit Failed(absl::Status why) : why_(std::move(why)) {}
    absl::StatusOr<std::vector<RowResult>> Wait() override { return why_; }
    void SendMasks(std::vector<RowMask>) override {}  // nothing runs

   private:
    absl::Status why_;
  };
  // Keeps the formation it started on alive until its rows are in.
  class OnGroup final : public PendingStep {
   public:
    OnGroup(WorkerGroup* group, std::shared_ptr<RemoteExecutor> exec, std::unique_ptr<PendingStep> step)
        : group_(group), exec_(std::move(exec)), step_(std::move(step)) {}
    absl::StatusOr<std::vector<RowResult>> Wait() override {
      auto rows = step_->Wait();
      if (rows.ok()) return rows;
      return group_->Judge(*exec_, rows.status());
    }
    void SendMasks(std::vector<RowMask> masks) override { step_->SendMasks(std::move(masks)); }

   private:
    WorkerGroup* group_;
    std::shared_ptr<RemoteExecutor> exec_;
    std::unique_ptr<PendingStep> step_;
  };
  std::shared_ptr<RemoteExecutor> exec;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!state_.serving) return std::make_unique<Failed>(state_.failure);
    exec = exec_;
  }
  std::unique_ptr<PendingStep> started = exec->StartStep(step);
  return std::make_unique<OnGroup>(this, std::move(exec), std::move(started));
}

void WorkerGroup::MarkBroken(uint64_t epoch, absl::Status why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!state_.serving || state_.epoch != epoch) return;  // already handled
    state_.serving = false;
    if (exec_options_.metrics) exec_options_.metrics->group_serving->Set(0);
    state_.failure = why;
    serving_ = false;
    exec_.reset();
    LOG(ERROR) << why.message();
    // Dissolved before mu_ is released: the supervisor reconnects as soon as
    // it sees no executor, and must find the rendezvous forming a new epoch,
    // not still holding the formation that just failed (it would handshake
    // that one, which its ranks have already left).
    rendezvous_->BeginEpoch();
  }
  cv_.notify_all();
}

void WorkerGroup::Supervise() {
  int silent_probes = 0;  // consecutive probes with a rank that did not answer
  while (!stopping_.load()) {
    std::shared_ptr<RemoteExecutor> exec;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (exec_) cv_.wait_for(lock, std::chrono::seconds(1));
      if (stopping_.load()) return;
      exec = exec_;
    }
    if (exec) {
      // Serving: look for a rank that died or stopped while no step ran.
      std::vector<RankProbe> probes = exec->Probe(kProbeTimeout);
      const bool dead = std::any_of(probes.begin(), probes.end(),
                                    [](const RankProbe& p) { return !p.reachable && !p.timed_out; });
      const bool silent = std::any_of(probes.begin(), probes.end(),
                                      [](const RankProbe& p) { return !p.reachable || !p.ready; });
      silent_probes = silent ? silent_probes + 1 : 0;
      // Unreachable is certain at once; a slow answer must repeat (a loaded machine).
      if ((dead || silent_probes >= 2) && !shutting_down_.load()) {
        MarkBroken(exec->epoch(), Diagnose(probes));
        silent_probes = 0;
      }
      continue;
    }
    // Not serving: wait for every rank to register again, then handshake
    // (not once shutdown has begun: nothing new will run).
    if (shutting_down_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    uint64_t tried = 0;
    absl::Status st = Connect(std::chrono::milliseconds(1000), &tried);
    if (!st.ok() && tried != 0 && !stopping_.load()) {
      // The formation could not be handshaken: its ranks register again in a
      // new epoch (unless one has already begun).
      LOG(WARNING) << "re-forming the tensor-parallel group (epoch " << tried << "): " << st.message();
      rendezvous_->BeginEpochIfCurrent(tried);
    }
  }
}

void WorkerGroup::BeginShutdown() {
  shutting_down_ = true;
  if (local_) local_->StopRestarting();
}

WorkerGroup::~WorkerGroup() {
  stopping_ = true;
  cv_.notify_all();
  if (rendezvous_) rendezvous_->Shutdown();
  if (supervisor_.joinable()) supervisor_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    exec_.reset();
  }
  local_.reset();  // the local workers: SIGTERM, then SIGKILL after 5 s
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

}  // namespace shardlm
