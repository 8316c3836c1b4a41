#include "collectives/host_staged_communicator.h"

#include <ATen/ATen.h>

#include <utility>

namespace shardlm {
namespace {

class HostStagedCommunicator final : public Communicator {
 public:
  explicit HostStagedCommunicator(std::unique_ptr<Communicator> host) : host_(std::move(host)) {}

  RankInfo rank_info() const override { return host_->rank_info(); }

  absl::StatusOr<at::Tensor> AllGather(const at::Tensor& shard, int64_t dim) override {
    return Back(host_->AllGather(ToHost(shard), dim), shard);
  }
  absl::StatusOr<at::Tensor> Gather(const at::Tensor& shard, int64_t dim, int root) override {
    return Back(host_->Gather(ToHost(shard), dim, root), shard);
  }
  absl::StatusOr<at::Tensor> ReduceScatter(const at::Tensor& partial, int64_t dim) override {
    return Back(host_->ReduceScatter(ToHost(partial), dim), partial);
  }
  absl::Status AllReduce(at::Tensor& tensor) override {
    return InPlace(tensor, [&](at::Tensor& h) { return host_->AllReduce(h); });
  }
  absl::Status Broadcast(at::Tensor& tensor, int root) override {
    return InPlace(tensor, [&](at::Tensor& h) { return host_->Broadcast(h, root); });
  }
  absl::Status Barrier() override { return host_->Barrier(); }
  absl::Status AsyncError() override { return host_->AsyncError(); }

 private:
  // A blocking copy: the device's pending work that produced `t` finishes first.
  static at::Tensor ToHost(const at::Tensor& t) { return t.is_cpu() ? t : t.to(at::kCPU).contiguous(); }

  static absl::StatusOr<at::Tensor> Back(absl::StatusOr<at::Tensor> result, const at::Tensor& like) {
    if (!result.ok() || !result->defined() || like.is_cpu()) return result;
    return result->to(like.device());
  }

  template <typename Op>
  static absl::Status InPlace(at::Tensor& tensor, Op op) {
    if (tensor.is_cpu()) return op(tensor);
    at::Tensor host = ToHost(tensor);
    absl::Status st = op(host);
    if (st.ok()) tensor.copy_(host);
    return st;
  }

  std::unique_ptr<Communicator> host_;
};

}  // namespace

std::unique_ptr<Communicator> MakeHostStagedCommunicator(std::unique_ptr<Communicator> host) {
  return std::make_unique<HostStagedCommunicator>(std::move(host));
}

}  // namespace shardlm
