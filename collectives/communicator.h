// The collectives a tensor-parallel forward pass needs, over at::Tensor.
//
// Every rank calls the same operation in the same order (SPMD). Shapes use the
// project notation: `f32[tokens, hidden.tp]` is sharded along hidden.
//
//   // x: f32[tokens, hidden.tp] -> f32[tokens, hidden]
//   SHARDLM_ASSIGN_OR_RETURN(at::Tensor full, comm.AllGather(x, /*dim=*/1));
//   // partial: f32[tokens, hidden] {tp unreduced} -> f32[tokens, hidden.tp]
//   SHARDLM_ASSIGN_OR_RETURN(at::Tensor mine, comm.ReduceScatter(partial, 1));
//
// Backends: SingleRankCommunicator (world size 1, identity, here); shared
// memory and Gloo between CPU processes; NCCL between GPUs (collectives/).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

#include "absl/status/statusor.h"

namespace shardlm {

// Rank and world size travel together, explicitly.
struct RankInfo {
  int rank = 0;
  int world_size = 1;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual RankInfo rank_info() const = 0;

  // Concatenates every rank's `shard` along `dim` (equal shapes on all ranks).
  virtual absl::StatusOr<at::Tensor> AllGather(const at::Tensor& shard, int64_t dim) = 0;
  // Concatenates every rank's `shard` along `dim` on `root` only; the other
  // ranks get an undefined tensor. The LM head's logits go to the sampling
  // rank this way rather than to every rank. Backends without a gather of
  // their own all-gather and drop the result off the root.
  virtual absl::StatusOr<at::Tensor> Gather(const at::Tensor& shard, int64_t dim, int root) {
    absl::StatusOr<at::Tensor> all = AllGather(shard, dim);
    if (!all.ok() || rank_info().rank == root) return all;
    return at::Tensor();
  }
  // Sums `partial` over ranks and returns this rank's 1/N slice along `dim`.
  virtual absl::StatusOr<at::Tensor> ReduceScatter(const at::Tensor& partial, int64_t dim) = 0;
  // Sums `tensor` over ranks, in place.
  virtual absl::Status AllReduce(at::Tensor& tensor) = 0;
  // Copies root's `tensor` into every rank's `tensor`.
  virtual absl::Status Broadcast(at::Tensor& tensor, int root) = 0;
  virtual absl::Status Barrier() = 0;
  // An error found after the collectives were enqueued: backends that do not
  // wait for each collective (NCCL on the compute stream) report a failure or
  // a timeout here once the step's results are on the host.
  virtual absl::Status AsyncError() { return absl::OkStatus(); }
  // Collectives enqueued without a record of their own (those inside a
  // replayed CUDA graph): a backend with a watchdog times the work enqueued
  // so far on the compute stream, `what` naming it in the error.
  virtual void WatchEnqueued(const char* what) { (void)what; }
};

// World size 1: every collective is the identity.
std::unique_ptr<Communicator> MakeSingleRankCommunicator();

// Rank `rank` of its group, talking to no one: each collective returns the
// shape the group's would, made from this rank's data alone (an all-gather
// repeats the shard world-size times, a reduce-scatter takes this rank's
// slice of its own partial sums, an all-reduce and a broadcast leave the
// tensor as it is). The values are not the group's. For a rank that
// rehearses a step by itself: the warm-up at load (worker/rank_worker.h),
// which must not wait for ranks that are still loading.
std::unique_ptr<Communicator> MakeStandInCommunicator(RankInfo rank);

}  // namespace shardlm
