#include "collectives/nccl_communicator.h"

#include <ATen/ATen.h>
#include <cuda_runtime.h>
#include <gloo/rendezvous/store.h>
#include <nccl.h>

#include <cstring>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"

namespace shardlm {
namespace {

using Clock = std::chrono::steady_clock;

absl::StatusOr<ncclDataType_t> NcclType(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return ncclFloat32;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kHalf:
      return ncclFloat16;
    case at::kInt:
      return ncclInt32;
    case at::kLong:
      return ncclInt64;
    default:
      return absl::InvalidArgumentError(absl::StrCat("NCCL: unsupported dtype ", c10::toString(t)));
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(RankInfo rank, ncclComm_t comm, cudaStream_t stream, NcclOptions options)
      : rank_(rank), comm_(comm), stream_(stream), options_(options) {}
  ~NcclCommunicator() override {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  RankInfo rank_info() const override { return rank_; }

  absl::StatusOr<at::Tensor> AllGather(const at::Tensor& shard, int64_t dim) override {
    at::Tensor src = shard.contiguous();
    auto type = NcclType(src.scalar_type());
    if (!type.ok()) return type.status();
    std::vector<int64_t> gshape = {rank_.world_size};
    gshape.insert(gshape.end(), src.sizes().begin(), src.sizes().end());
    at::Tensor gathered = at::empty(gshape, src.options());
    absl::Status st = Run("all-gather", [&] {
      return ncclAllGather(src.data_ptr(), gathered.data_ptr(), src.numel(), *type, comm_, stream_);
    });
    if (!st.ok()) return st;
    const int64_t d = dim < 0 ? dim + src.dim() : dim;
    return gathered.movedim(0, d).flatten(d, d + 1).contiguous();
  }

  absl::StatusOr<at::Tensor> ReduceScatter(const at::Tensor& partial, int64_t dim) override {
    const int64_t d = dim < 0 ? dim + partial.dim() : dim;
    const int64_t n = rank_.world_size;
    if (partial.size(d) % n != 0) {
      return absl::InvalidArgumentError(absl::StrCat("reduce-scatter: dimension ", d, " of size ",
                                                     partial.size(d), " does not divide by world size ", n));
    }
    auto type = NcclType(partial.scalar_type());
    if (!type.ok()) return type.status();
    // Rank-major layout: [..., n * p, ...] -> [n, ..., p, ...].
    std::vector<int64_t> split = partial.sizes().vec();
    split[d] = partial.size(d) / n;
    split.insert(split.begin() + d, n);
    at::Tensor src = partial.reshape(split).movedim(d, 0).contiguous();
    std::vector<int64_t> out_shape = partial.sizes().vec();
    out_shape[d] /= n;
    at::Tensor out = at::empty(out_shape, partial.options());
    absl::Status st = Run("reduce-scatter", [&] {
      return ncclReduceScatter(src.data_ptr(), out.data_ptr(), out.numel(), *type, ncclSum, comm_, stream_);
    });
    if (!st.ok()) return st;
    return out;
  }

  absl::Status AllReduce(at::Tensor& tensor) override {
    auto type = NcclType(tensor.scalar_type());
    if (!type.ok()) return type.status();
    at::Tensor buf = tensor.contiguous();
    absl::Status st = Run("all-reduce", [&] {
      return ncclAllReduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), *type, ncclSum, comm_, stream_);
    });
    if (st.ok() && !buf.is_same(tensor)) tensor.copy_(buf);
    return st;
  }

  absl::Status Broadcast(at::Tensor& tensor, int root) override {
    auto type = NcclType(tensor.scalar_type());
    if (!type.ok()) return type.status();
    at::Tensor buf = tensor.contiguous();
    absl::Status st = Run("broadcast", [&] {
      return ncclBroadcast(buf.data_ptr(), buf.data_ptr(), buf.numel(), *type, root, comm_, stream_);
    });
    if (st.ok() && !buf.is_same(tensor)) tensor.copy_(buf);
    return st;
  }

  absl::Status Barrier() override {
    at::Tensor one = at::ones({1}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, options_.device));
    return AllReduce(one);
  }

 private:
  // Enqueues one collective, then waits for it with a watchdog: past the
  // timeout, or on an asynchronous NCCL error, the communicator is aborted.
  template <typename Fn>
  absl::Status Run(const char* what, Fn&& enqueue) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) return broken_;
    auto fail = [&](absl::StatusCode code, const std::string& why) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
      broken_ = absl::Status(code, absl::StrCat("nccl ", what, " failed on rank ", rank_.rank, " of ",
                                                rank_.world_size, ": ", why));
      return broken_;
    };
    ncclResult_t r = enqueue();
    if (r != ncclSuccess && r != ncclInProgress)
      return fail(absl::StatusCode::kUnavailable, ncclGetErrorString(r));
    const auto deadline = Clock::now() + options_.timeout;
    while (true) {
      cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return absl::OkStatus();
      if (q != cudaErrorNotReady) return fail(absl::StatusCode::kInternal, cudaGetErrorString(q));
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        return fail(absl::StatusCode::kUnavailable, ncclGetErrorString(async));
      }
      if (Clock::now() > deadline) {
        return fail(
            absl::StatusCode::kDeadlineExceeded,
            absl::StrCat("not finished after ", options_.timeout.count(), " ms (peer dead or stopped)"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  RankInfo rank_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  NcclOptions options_;
  std::mutex mu_;
  absl::Status broken_;
};

}  // namespace

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(
    RankInfo rank, std::shared_ptr<gloo::rendezvous::Store> store, const NcclOptions& options) {
  if (cudaSetDevice(options.device) != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat("NCCL: cannot use CUDA device ", options.device));
  }
  ncclUniqueId id;
  try {
    if (rank.rank == 0) {
      ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess)
        return absl::UnavailableError(absl::StrCat("ncclGetUniqueId: ", ncclGetErrorString(r)));
      store->set("nccl-unique-id", std::vector<char>(id.internal, id.internal + sizeof(id.internal)));
    } else {
      std::vector<char> bytes = store->get("nccl-unique-id");
      if (bytes.size() != sizeof(id.internal))
        return absl::InternalError("NCCL unique id has the wrong size");
      std::memcpy(id.internal, bytes.data(), bytes.size());
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("NCCL bootstrap through the store failed: ", e.what()));
  }
  // Non-blocking, so that ncclCommAbort can interrupt a hung collective.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, rank.world_size, id, rank.rank, &config);
  const auto deadline = Clock::now() + options.timeout;
  while (r == ncclInProgress && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ncclCommGetAsyncError(comm, &r);
  }
  if (r != ncclSuccess) {
    if (comm != nullptr) ncclCommAbort(comm);
    return absl::UnavailableError(absl::StrCat("ncclCommInitRank for rank ", rank.rank, " of ",
                                               rank.world_size, ": ",
                                               r == ncclInProgress ? "timed out" : ncclGetErrorString(r)));
  }
  cudaStream_t stream = nullptr;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  return std::unique_ptr<Communicator>(new NcclCommunicator(rank, comm, stream, options));
}

}  // namespace shardlm
