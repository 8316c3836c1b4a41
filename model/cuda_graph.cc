// The CUDA variant of model/cuda_graph.h, over at::cuda::CUDAGraph.
#include "model/cuda_graph.h"

#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace shardlm {
namespace {

using PoolId = decltype(std::declval<at::cuda::CUDAGraph&>().pool());

// libtorch 2.x takes the capture mode. 1.13 (Debian's headers, where this
// file is only compiled) captures in global mode only, where the NCCL
// watchdog's event queries from its own thread would invalidate a capture:
// no graphs there.
template <typename G, typename = void>
struct HasCaptureMode : std::false_type {};
template <typename G>
struct HasCaptureMode<G, std::void_t<decltype(std::declval<G&>().capture_begin(
                             std::declval<PoolId>(), cudaStreamCaptureModeThreadLocal))>> : std::true_type {};

template <typename G>
void BeginCapture(G& graph, PoolId pool) {
  if constexpr (HasCaptureMode<G>::value) {
    graph.capture_begin(pool, cudaStreamCaptureModeThreadLocal);
  } else {
    graph.capture_begin(pool);  // not reached: MakeCudaGraphs makes none there
  }
}

class TorchCudaGraphs final : public CudaGraphs {
 public:
  explicit TorchCudaGraphs(c10::Device device) : device_(device) {}

  absl::StatusOr<int> Capture(const std::function<absl::Status()>& fn) override {
    absl::Status result;
    auto graph = std::make_unique<at::cuda::CUDAGraph>();
    SHARDLM_RETURN_IF_ERROR(CatchTorchErrors("capturing a CUDA graph", [&]() -> absl::Status {
      const c10::cuda::CUDAGuard device_guard(device_);
      c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device_.index());
      // Capture needs a stream other than the default one; the side stream
      // starts after the work already queued and the current stream resumes
      // after the capture's warm-up. One side stream for every capture: the
      // allocator keeps a pool's free blocks per stream, so graphs captured
      // on one stream reuse each other's freed intermediates.
      if (!side_.has_value()) side_ = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_.index());
      c10::cuda::CUDAStream side = *side_;
      at::cuda::CUDAEvent ready;
      ready.record(current);
      ready.block(side);
      {
        const c10::cuda::CUDAStreamGuard stream_guard(side);
        SHARDLM_RETURN_IF_ERROR(fn());  // warm-up
        BeginCapture(*graph, pool_);
        try {
          result = fn();
        } catch (const std::exception& e) {
          result = absl::InternalError(absl::StrCat("while capturing: ", e.what()));
        }
        // Ended whatever fn returned: a stream left capturing breaks the device.
        graph->capture_end();
      }
      at::cuda::CUDAEvent done;
      done.record(side);
      done.block(current);
      return absl::OkStatus();
    }));
    SHARDLM_RETURN_IF_ERROR(result);
    if (graphs_.empty()) pool_ = graph->pool();
    graphs_.push_back(std::move(graph));
    return static_cast<int>(graphs_.size()) - 1;
  }

  absl::Status Replay(int index) override {
    if (index < 0 || index >= static_cast<int>(graphs_.size())) {
      return absl::InternalError(absl::StrCat("CUDA graph ", index, " was never captured"));
    }
    return CatchTorchErrors("replaying a CUDA graph", [&] {
      const c10::cuda::CUDAGuard device_guard(device_);
      graphs_[index]->replay();
      return absl::OkStatus();
    });
  }

 private:
  c10::Device device_;
  std::optional<c10::cuda::CUDAStream> side_;  // where every graph is captured
  PoolId pool_{0, 0};                          // the first graph's pool, shared by the rest
  std::vector<std::unique_ptr<at::cuda::CUDAGraph>> graphs_;
};

}  // namespace

std::unique_ptr<CudaGraphs> MakeCudaGraphs(c10::Device device) {
  if (!device.is_cuda() || !HasCaptureMode<at::cuda::CUDAGraph>::value) return nullptr;
  return std::make_unique<TorchCudaGraphs>(device);
}

}  // namespace shardlm
