// Wraps a Communicator and adds up the wall time spent inside collectives
// (which includes waiting for slower peers), for the step timing breakdown.
#pragma once

#include <chrono>
#include <memory>
#include <type_traits>

#include "collectives/communicator.h"

namespace shardlm {

class TimedCommunicator final : public Communicator {
 public:
  explicit TimedCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  RankInfo rank_info() const override { return inner_->rank_info(); }
  absl::StatusOr<at::Tensor> AllGather(const at::Tensor& shard, int64_t dim) override {
    return Time([&] { return inner_->AllGather(shard, dim); });
  }
  absl::StatusOr<at::Tensor> ReduceScatter(const at::Tensor& partial, int64_t dim) override {
    return Time([&] { return inner_->ReduceScatter(partial, dim); });
  }
  absl::StatusOr<at::Tensor> Gather(const at::Tensor& shard, int64_t dim, int root) override {
    return Time([&] { return inner_->Gather(shard, dim, root); });
  }
  absl::Status AllReduce(at::Tensor& tensor) override {
    return Time([&] { return inner_->AllReduce(tensor); });
  }
  absl::Status Broadcast(at::Tensor& tensor, int root) override {
    return Time([&] { return inner_->Broadcast(tensor, root); });
  }
  absl::Status Barrier() override {
    return Time([&] { return inner_->Barrier(); });
  }
  absl::Status AsyncError() override { return inner_->AsyncError(); }
  void WatchEnqueued(const char* what) override { inner_->WatchEnqueued(what); }

  // Swaps in a new group's communicator (same rank and world size) after the
  // old one broke; the model keeps pointing at this wrapper.
  void Reset(std::unique_ptr<Communicator> inner) { inner_ = std::move(inner); }

  // Microseconds spent in collectives since the last call.
  int64_t TakeMicros() {
    const int64_t us = micros_;
    micros_ = 0;
    return us;
  }

 private:
  template <typename Fn>
  std::invoke_result_t<Fn> Time(Fn&& fn) {
    const auto start = std::chrono::steady_clock::now();
    auto result = fn();
    micros_ += std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start)
                   .count();
    return result;
  }

  std::unique_ptr<Communicator> inner_;
  int64_t micros_ = 0;
};

}  // namespace shardlm
