#include "coordinator/worker_group.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "coordinator/rendezvous_service.h"
#include "model/fingerprint.h"

namespace shardlm {

absl::StatusOr<std::unique_ptr<WorkerGroup>> WorkerGroup::Start(const WorkerGroupOptions& options) {
  if (options.tp < 1 || options.tp > 64) {
    return absl::InvalidArgumentError(absl::StrCat("--tp must be in [1, 64], got ", options.tp));
  }
  auto fingerprint = ModelFingerprint(options.model_dir);
  if (!fingerprint.ok()) return fingerprint.status();
  std::unique_ptr<WorkerGroup> g(new WorkerGroup());
  g->options_ = options;
  ::shardlm::worker::v1::RegisterResponse settings;
  settings.set_store_prefix(absl::StrCat("group-", getpid(), "-", *fingerprint));
  settings.set_dtype(options.dtype);
  settings.set_kv_cache_bytes(options.kv_cache_bytes);
  settings.set_block_size(options.block_size);
  settings.set_collective_timeout_ms(options.collective_timeout_ms);
  g->rendezvous_ = std::make_unique<RendezvousService>(options.tp, *fingerprint, settings);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(g->rendezvous_.get());
  g->server_ = builder.BuildAndStart();
  if (!g->server_ || port == 0)
    return absl::UnavailableError("cannot listen for workers on " + options.listen);
  const std::string host = options.listen.substr(0, options.listen.rfind(':'));
  g->endpoint_ = absl::StrCat(host == "0.0.0.0" ? "127.0.0.1" : host, ":", port);
  if (g->options_.worker_threads <= 0) {
    // Local workers share this machine's cores.
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    g->options_.worker_threads = std::max(1, cores / options.tp);
  }
  if (options.spawn_local) g->Spawn(options.tp);
  auto addresses = g->rendezvous_->WaitForWorkers(std::chrono::milliseconds(options.start_timeout_ms));
  if (!addresses.ok()) return addresses.status();
  RemoteExecutorOptions eo;
  eo.handshake_timeout = std::chrono::milliseconds(options.start_timeout_ms);
  eo.step_timeout = std::chrono::milliseconds(options.step_timeout_ms);
  auto exec = RemoteExecutor::Connect(*addresses, *fingerprint, eo);
  if (!exec.ok()) return exec.status();
  g->executor_ = std::move(*exec);
  return g;
}

void WorkerGroup::Spawn(int count) {
  const pid_t parent = getpid();
  for (int i = 0; i < count; ++i) {
    std::vector<std::string> args = {
        options_.exe, "worker",           "--coordinator", endpoint_,
        "--model",    options_.model_dir, "--log-level",   std::to_string(options_.worker_log_level)};
    pid_t pid = fork();
    if (pid == 0) {
      // Child: die with the parent, whatever kills it.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(options_.exe.c_str(), argv.data());
      _exit(127);
    }
    if (pid > 0) {
      std::lock_guard<std::mutex> lock(children_mu_);
      children_.push_back(pid);
    }
  }
  // Reap children as they exit so none lingers as a zombie; count the deaths.
  reaper_ = std::thread([this] {
    size_t alive;
    {
      std::lock_guard<std::mutex> lock(children_mu_);
      alive = children_.size();
    }
    while (alive > 0) {
      int status = 0;
      pid_t pid = waitpid(-1, &status, 0);
      if (pid < 0) break;
      std::lock_guard<std::mutex> lock(children_mu_);
      for (pid_t& c : children_) {
        if (c != pid) continue;
        c = -1;
        --alive;
        if (!stopping_.load()) {
          ++dead_;
          LOG(ERROR) << "worker process " << pid << " exited (status " << status << ")";
        }
      }
    }
  });
}

void WorkerGroup::StopChildren() {
  stopping_ = true;
  auto signal_all = [&](int sig) {
    std::lock_guard<std::mutex> lock(children_mu_);
    bool any = false;
    for (pid_t pid : children_) {
      if (pid > 0) {
        any = true;
        if (sig != 0) kill(pid, sig);
      }
    }
    return any;
  };
  signal_all(SIGTERM);
  signal_all(SIGCONT);  // a stopped worker must run to see its SIGTERM
  // Grace period, then SIGKILL whatever is left.
  for (int i = 0; i < 50 && signal_all(0); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  signal_all(SIGKILL);
  if (reaper_.joinable()) reaper_.join();
}

WorkerGroup::~WorkerGroup() {
  executor_.reset();
  StopChildren();
  if (rendezvous_) rendezvous_->Shutdown();
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

}  // namespace shardlm
