// World-size-1 communicator: the identity for every collective. Used by the
// single-rank engine so that the forward pass is written once, with its
// collectives in place, for every world size.
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

}  // namespace

std::unique_ptr<Communicator> MakeSingleRankCommunicator() {
  return std::make_unique<SingleRankCommunicator>();
}

}  // namespace shardlm
