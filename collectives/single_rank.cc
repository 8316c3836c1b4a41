// World-size-1 communicator: the identity for every collective. Used by the
// single-rank engine so that the forward pass is written once, with its
// collectives in place, for every world size.
#include <ATen/ATen.h>

#include <vector>

#include "collectives/communicator.h"

namespace shardlm {
namespace {

class SingleRankCommunicator final : public Communicator {
 public:
  RankInfo rank_info() const override { return RankInfo{0, 1}; }
  absl::StatusOr<at::Tensor> AllGather(const at::Tensor& shard, int64_t) override { return shard; }
  absl::StatusOr<at::Tensor> ReduceScatter(const at::Tensor& partial, int64_t) override { return partial; }
  absl::Status AllReduce(at::Tensor&) override { return absl::OkStatus(); }
  absl::Status Broadcast(at::Tensor&, int root) override {
    if (root != 0) return absl::InvalidArgumentError("broadcast root must be 0 at world size 1");
    return absl::OkStatus();
  }
  absl::Status Barrier() override { return absl::OkStatus(); }
};

class StandInCommunicator final : public Communicator {
 public:
  explicit StandInCommunicator(RankInfo rank) : rank_(rank) {}
  RankInfo rank_info() const override { return rank_; }
  absl::StatusOr<at::Tensor> AllGather(const at::Tensor& shard, int64_t dim) override {
    return at::cat(std::vector<at::Tensor>(rank_.world_size, shard), dim);
  }
  absl::StatusOr<at::Tensor> ReduceScatter(const at::Tensor& partial, int64_t dim) override {
    if (partial.size(dim) % rank_.world_size != 0) {
      return absl::InvalidArgumentError("reduce-scatter: the dimension does not split evenly over the ranks");
    }
    const int64_t slice = partial.size(dim) / rank_.world_size;
    return partial.narrow(dim, rank_.rank * slice, slice).contiguous();
  }
  absl::Status AllReduce(at::Tensor&) override { return absl::OkStatus(); }
  absl::Status Broadcast(at::Tensor&, int) override { return absl::OkStatus(); }
  absl::Status Barrier() override { return absl::OkStatus(); }

 private:
  RankInfo rank_;
};

}  // namespace

std::unique_ptr<Communicator> MakeSingleRankCommunicator() {
  return std::make_unique<SingleRankCommunicator>();
}

std::unique_ptr<Communicator> MakeStandInCommunicator(RankInfo rank) {
  return std::make_unique<StandInCommunicator>(rank);
}

}  // namespace shardlm
