#include "coordinator/group/local_workers.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

extern char** environ;

namespace shardlm {
namespace {

constexpr int64_t kFirstBackoffMs = 500;
constexpr int64_t kMaxBackoffMs = 10000;
constexpr int64_t kYoungMs = 10000;  // a rank that dies younger than this backs off longer

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

LocalWorkers::LocalWorkers(LocalWorkerOptions options) : options_(std::move(options)) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    children_.resize(options_.tp);
    for (int r = 0; r < options_.tp; ++r) {
      children_[r].pid = Spawn(r);
      children_[r].started_ms = NowMs();
    }
  }
  reaper_ = std::thread([this] { Reap(); });
}

LocalWorkers::~LocalWorkers() { Stop(); }

pid_t LocalWorkers::Spawn(int rank) {
  const pid_t parent = getpid();
  std::vector<std::string> args = {options_.exe,
                                   "worker",
                                   "--coordinator",
                                   options_.coordinator,
                                   "--model",
                                   options_.model_dir,
                                   "--rank",
                                   std::to_string(rank),
                                   "--log-level",
                                   std::to_string(options_.log_level),
                                   "--threads",
                                   std::to_string(options_.threads),
                                   "--device",
                                   options_.device,
                                   "--cuda-graph-max-batch",
                                   std::to_string(options_.cuda_graph_max_batch),
                                   "--warmup-tokens",
                                   std::to_string(options_.warmup_tokens),
                                   "--collectives",
                                   options_.collectives};
  if (options_.internal_token.empty()) args.push_back("--insecure-internal");
  // The token travels in the environment: argv is visible to every user.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "SHARDLM_INTERNAL_TOKEN=", 23) != 0) env_strings.push_back(*e);
  }
  if (!options_.internal_token.empty())
    env_strings.push_back("SHARDLM_INTERNAL_TOKEN=" + options_.internal_token);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    // Child: die with the parent, whatever kills it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    // A process group of its own: a signal to the coordinator's group (a
    // terminal's Ctrl-C) reaches the coordinator alone, which drains and then
    // stops its workers, rather than killing the ranks streams still need.
    setpgid(0, 0);
    execve(options_.exe.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  if (pid > 0) LOG(INFO) << "started worker rank " << rank << " (pid " << pid << ")";
  return pid;
}

void LocalWorkers::Reap() {
  while (true) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    std::unique_lock<std::mutex> lock(mu_);
    const bool stopping = stopping_.load();
    if (pid > 0) {
      for (size_t r = 0; r < children_.size(); ++r) {
        Child& c = children_[r];
        if (c.pid != pid) continue;
        c.pid = -1;
        if (stopping) break;
        if (no_restarts_.load()) {
          LOG(WARNING) << "worker rank " << r << " (pid " << pid
                       << ") exited during shutdown; not starting it again";
          break;
        }
        const bool young = NowMs() - c.started_ms < kYoungMs;
        c.backoff_ms = young ? std::min(kMaxBackoffMs, c.backoff_ms * 2) : kFirstBackoffMs;
        c.restart_at_ms = NowMs() + c.backoff_ms;
        LOG(ERROR) << "worker rank " << r << " (pid " << pid << ") exited ("
                   << (WIFSIGNALED(status) ? absl::StrCat("signal ", WTERMSIG(status))
                                           : absl::StrCat("status ", WEXITSTATUS(status)))
                   << "); starting it again in " << c.backoff_ms << " ms";
      }
      continue;  // more may have exited
    }
    const bool any_alive =
        std::any_of(children_.begin(), children_.end(), [](const Child& c) { return c.pid > 0; });
    if (stopping && !any_alive) return;
    if (!stopping && !no_restarts_.load()) {
      for (size_t r = 0; r < children_.size(); ++r) {
        Child& c = children_[r];
        if (c.pid < 0 && c.restart_at_ms >= 0 && NowMs() >= c.restart_at_ms) {
          c.restart_at_ms = -1;
          c.started_ms = NowMs();
          c.pid = Spawn(static_cast<int>(r));
          if (options_.restarted) options_.restarted();
        }
      }
    }
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void LocalWorkers::Stop() {
  stopping_ = true;
  auto signal_all = [&](int sig) {
    std::lock_guard<std::mutex> lock(mu_);
    bool any = false;
    for (const Child& c : children_) {
      if (c.pid > 0) {
        any = true;
        if (sig != 0) kill(c.pid, sig);
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

}  // namespace shardlm
