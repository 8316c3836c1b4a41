// shardlm.worker.v1.Worker for one rank: the RPCs the coordinator calls
// (Handshake, Step, StepMasks, Health), the order steps run in, and the
// rank's readiness. The process around it (worker/worker_server.h) registers,
// forms the collectives, loads the shard and tells it when it serves.
//
//   WorkerService service(fingerprint, token);
//   builder.RegisterService(&service);
//   service.RunCompute([&] { worker = RankWorker::Load(...); });
//   service.SetReady(worker.get(), timed_comm, kv_bytes, epoch);
#pragma once

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "shardlm/worker/v1/worker.grpc.pb.h"
#include "step/step_masks.h"
#include "worker/compute_thread.h"
#include "worker/rank_worker.h"
#include "worker/timed_communicator.h"

namespace shardlm {

class WorkerService final : public worker::v1::Worker::Service {
 public:
  WorkerService(std::string fingerprint, std::string token);

  // Runs fn on the thread that runs every step: loading the shard and
  // clearing the cache too, so the process has one OpenMP team.
  void RunCompute(const std::function<void()>& fn) { compute_.Run(fn); }

  // Serving in `epoch` with a loaded worker.
  void SetReady(RankWorker* worker, TimedCommunicator* comm, int64_t kv_bytes, uint64_t epoch);
  // Not serving: loading, rejoining a new group, or failed for good.
  void SetNotReady(absl::Status why);
  // Runs `fn` with no step in flight (a step of the old group finishes or
  // fails on its collective timeout first).
  template <typename Fn>
  void Exclusive(Fn&& fn) {
    std::lock_guard<std::mutex> lock(mu_);
    fn();
  }
  // Called when the epoch moves on while a step may hold mu_: Health answers
  // at once, without waiting for the step.
  void MarkLeaving(uint64_t epoch);
  // A member of a formed group that has not failed (grpc.health.v1's answer).
  bool Ready();

  grpc::Status Handshake(grpc::ServerContext* ctx, const worker::v1::HandshakeRequest* req,
                         worker::v1::HandshakeResponse* resp) override;
  grpc::Status Step(grpc::ServerContext* ctx, const worker::v1::StepRequest* req,
                    worker::v1::StepResponse* resp) override;
  // Never waits for a step: the masks are for one that is running or queued.
  grpc::Status StepMasks(grpc::ServerContext* ctx, const worker::v1::StepMasksRequest* req,
                         worker::v1::StepMasksResponse*) override;
  // Never waits for a step: the coordinator probes ranks while steps run.
  grpc::Status Health(grpc::ServerContext* ctx, const worker::v1::HealthRequest*,
                      worker::v1::HealthResponse* resp) override;

 private:
  // Waits (mu_ held through `lock`) until the step sent before this one has
  // run here: the coordinator may send the next step before this one's rows
  // are back, and they run in the order sent (docs/scheduler.md, overlapped
  // steps). A step planned for another group formation (delayed past a
  // regroup, or from a coordinator this rank no longer serves) is refused
  // before it runs, and without marking this rank broken: the group it
  // belongs to is gone, this one is not. Checked again after the wait, since
  // a regroup can happen meanwhile.
  absl::Status AwaitTurn(grpc::ServerContext* ctx, const worker::v1::StepRequest& req,
                         std::unique_lock<std::mutex>& lock);
  // Decodes the step, runs it on the rank (its masks awaited before sampling
  // when they follow) and encodes its rows. A failed run leaves the group in
  // an unknown state: not ready until the coordinator forms a new group.
  absl::Status RunStep(grpc::ServerContext* ctx, const worker::v1::StepRequest& req,
                       worker::v1::StepResponse* resp);
  absl::Status State();
  void SetState(absl::Status st, std::string text);

  std::mutex mu_;                     // one step at a time
  std::condition_variable order_cv_;  // last_step_ moved (with mu_)
  uint64_t last_step_ = 0;            // the step run last in this epoch (guarded by mu_)
  ComputeThread compute_;             // every forward pass (worker/compute_thread.h)
  MaskMailbox masks_;                 // constraint masks that follow their step (rank 0)
  const std::string fingerprint_;
  const std::string token_;
  RankWorker* worker_ = nullptr;
  TimedCommunicator* comm_ = nullptr;
  int64_t kv_bytes_ = 0;
  uint64_t epoch_ = 0;
  std::mutex state_mu_;  // guards state_ and state_text_; never held across a step
  absl::Status state_ = absl::UnavailableError("worker is loading its shard");
  std::string state_text_ = "loading";
};

}  // namespace shardlm
