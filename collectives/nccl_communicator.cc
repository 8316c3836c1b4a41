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
      : rank_(rank), comm_(comm), stream_(stream), options_(std::move(options)) {
    if (options_.stream) {
      cudaEventCreateWithFlags(&event_, cudaEventDisableTiming);
      watchdog_ = std::thread([this] { Watch(); });
    }
  }
  ~NcclCommunicator() override {
    if (watchdog_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
      }
      watchdog_.join();
    }
    if (aborter_.joinable()) aborter_.join();
    if (comm_ != nullptr) {
      // A collective still running (a regroup after a peer died) would make
      // ncclCommDestroy wait for it forever: abort instead. (Either waits
      // for the CUDA graphs that captured this communicator: their owner
      // drops them first, RankWorker::DropGraphs.)
      const bool idle =
          event_ == nullptr ? cudaStreamQuery(stream_) == cudaSuccess : cudaEventQuery(event_) == cudaSuccess;
      if (idle) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    }
    if (event_ != nullptr) cudaEventDestroy(event_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::Status AsyncError() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_.ok() && comm_ != nullptr) {
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        return Fail("step", absl::StatusCode::kUnavailable, ncclGetErrorString(async));
      }
    }
    return broken_;
  }

  RankInfo rank_info() const override { return rank_; }

  void WatchEnqueued(const char* what) override {
    if (!options_.stream) return;  // private-stream collectives are waited for as they run
    std::lock_guard<std::mutex> serial(enqueue_mu_);
    cudaSetDevice(options_.device);
    StartWatch(what, static_cast<cudaStream_t>(options_.stream())).IgnoreError();  // a failure is in broken_
  }

  absl::StatusOr<at::Tensor> AllGather(const at::Tensor& shard, int64_t dim) override {
    at::Tensor src = shard.contiguous();
    auto type = NcclType(src.scalar_type());
    if (!type.ok()) return type.status();
    std::vector<int64_t> gshape = {rank_.world_size};
    gshape.insert(gshape.end(), src.sizes().begin(), src.sizes().end());
    at::Tensor gathered = at::empty(gshape, src.options());
    absl::Status st = Run("all-gather", [&](cudaStream_t stream, ncclComm_t comm) {
      return ncclAllGather(src.data_ptr(), gathered.data_ptr(), src.numel(), *type, comm, stream);
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
    absl::Status st = Run("reduce-scatter", [&](cudaStream_t stream, ncclComm_t comm) {
      return ncclReduceScatter(src.data_ptr(), out.data_ptr(), out.numel(), *type, ncclSum, comm, stream);
    });
    if (!st.ok()) return st;
    return out;
  }

  absl::Status AllReduce(at::Tensor& tensor) override {
    auto type = NcclType(tensor.scalar_type());
    if (!type.ok()) return type.status();
    at::Tensor buf = tensor.contiguous();
    absl::Status st = Run("all-reduce", [&](cudaStream_t stream, ncclComm_t comm) {
      return ncclAllReduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), *type, ncclSum, comm, stream);
    });
    if (st.ok() && !buf.is_same(tensor)) tensor.copy_(buf);
    return st;
  }

  absl::Status Broadcast(at::Tensor& tensor, int root) override {
    auto type = NcclType(tensor.scalar_type());
    if (!type.ok()) return type.status();
    at::Tensor buf = tensor.contiguous();
    absl::Status st = Run("broadcast", [&](cudaStream_t stream, ncclComm_t comm) {
      return ncclBroadcast(buf.data_ptr(), buf.data_ptr(), buf.numel(), *type, root, comm, stream);
    });
    if (st.ok() && !buf.is_same(tensor)) tensor.copy_(buf);
    return st;
  }

  absl::Status Barrier() override {
    at::Tensor one = at::ones({1}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, options_.device));
    return AllReduce(one);
  }

 private:
  // Aborts the communicator with `code` and why; mu_ held. The abort runs on
  // its own thread, without mu_: it sets NCCL's abort flag at once (the hung
  // kernels return), then waits until no CUDA graph holds the communicator,
  // which takes the compute thread seeing this failure and dropping its
  // graphs (RankWorker) after AsyncError, which needs mu_.
  absl::Status Fail(const char* what, absl::StatusCode code, const std::string& why) {
    if (comm_ != nullptr) {
      ncclComm_t comm = comm_;
      aborter_ = std::thread([comm] { ncclCommAbort(comm); });
    }
    comm_ = nullptr;
    broken_ = absl::Status(code, absl::StrCat("nccl ", what, " failed on rank ", rank_.rank, " of ",
                                              rank_.world_size, ": ", why));
    return broken_;
  }
  absl::Status FailLocked(const char* what, absl::StatusCode code, const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    return broken_.ok() ? Fail(what, code, why) : broken_;
  }

  // Enqueues one collective. On the compute stream it records an event for
  // the watchdog and returns; on the private stream it waits, polling for
  // errors, until the collective finishes or the timeout passes. mu_ is not
  // held inside NCCL: a launch that blocks (the GPU stalled on a dead peer)
  // must not keep the watchdog from aborting.
  template <typename Fn>
  absl::Status Run(const char* what, Fn&& enqueue) {
    std::lock_guard<std::mutex> serial(enqueue_mu_);
    ncclComm_t comm;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!broken_.ok()) return broken_;
      comm = comm_;
    }
    // NCCL and the event follow the current device: make it this rank's.
    cudaSetDevice(options_.device);
    cudaStream_t stream = options_.stream ? static_cast<cudaStream_t>(options_.stream()) : stream_;
    const auto start = Clock::now(), deadline = start + options_.timeout;
    ncclResult_t r = enqueue(stream, comm);
    // A non-blocking communicator may still be queueing the collective.
    while (r == ncclInProgress && Clock::now() < deadline) {
      std::this_thread::yield();
      ncclCommGetAsyncError(comm, &r);
    }
    if (r == ncclInProgress) {
      return FailLocked(what, absl::StatusCode::kDeadlineExceeded,
                        absl::StrCat("not enqueued after ", options_.timeout.count(), " ms"));
    }
    if (r != ncclSuccess) return FailLocked(what, absl::StatusCode::kUnavailable, ncclGetErrorString(r));
    if (options_.stream) {
      // Captured into a CUDA graph: nothing runs yet, so there is nothing to
      // time; after each replay the caller calls WatchEnqueued.
      cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
      if (cudaStreamIsCapturing(stream, &capturing) == cudaSuccess &&
          capturing != cudaStreamCaptureStatusNone) {
        std::lock_guard<std::mutex> lock(mu_);
        return broken_;
      }
      return StartWatch(what, stream);
    }
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (FinishedOrFailed(what, cudaStreamQuery(stream), start)) return broken_;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // Records the watchdog's event on `stream` and starts timing `what`.
  absl::Status StartWatch(const char* what, cudaStream_t stream) {
    const cudaError_t e = cudaEventRecord(event_, stream);
    std::lock_guard<std::mutex> lock(mu_);
    if (e != cudaSuccess)
      return broken_.ok() ? Fail(what, absl::StatusCode::kInternal, cudaGetErrorString(e)) : broken_;
    pending_ = what;
    pending_since_ = Clock::now();
    return broken_;
  }

  // One look at a collective not yet known to be done, `query` being its
  // event's or stream's state: true once it is done or has failed (an error,
  // an NCCL error, or the timeout since `since`), a failure aborting the
  // communicator into broken_. mu_ held, broken_ ok.
  bool FinishedOrFailed(const char* what, cudaError_t query, Clock::time_point since) {
    if (query == cudaSuccess) return true;
    if (query != cudaErrorNotReady) {
      Fail(what, absl::StatusCode::kInternal, cudaGetErrorString(query)).IgnoreError();
      return true;
    }
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      Fail(what, absl::StatusCode::kUnavailable, ncclGetErrorString(async)).IgnoreError();
      return true;
    }
    if (Clock::now() - since > options_.timeout) {
      Fail(what, absl::StatusCode::kDeadlineExceeded,
           absl::StrCat("not finished after ", options_.timeout.count(), " ms (peer dead or stopped)"))
          .IgnoreError();
      return true;
    }
    return false;
  }

  // The watchdog of compute-stream collectives: every millisecond, is the
  // last one done, has NCCL reported an error, has the timeout passed?
  void Watch() {
    cudaSetDevice(options_.device);  // the event lives on this rank's device
    while (true) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      if (pending_ == nullptr || !broken_.ok()) continue;
      if (FinishedOrFailed(pending_, cudaEventQuery(event_), pending_since_)) pending_ = nullptr;
    }
  }

  RankInfo rank_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  NcclOptions options_;
  std::mutex enqueue_mu_;  // one collective enqueued at a time
  std::mutex mu_;          // broken_, comm_'s abort and the watchdog state
  absl::Status broken_;
  // The compute-stream mode's watchdog state, under mu_.
  cudaEvent_t event_ = nullptr;
  const char* pending_ = nullptr;  // the last collective, until its event fires
  Clock::time_point pending_since_;
  bool stop_ = false;
  std::thread watchdog_;
  std::thread aborter_;  // the one ncclCommAbort, after a failure
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
  if (!options.stream) cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  return std::unique_ptr<Communicator>(new NcclCommunicator(rank, comm, stream, options));
}

}  // namespace shardlm
