#include "model/device.h"

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace shardlm {

int VisibleCudaDevices() {
  if (!at::hasCUDA()) return 0;
  return static_cast<int>(at::detail::getCUDAHooks().getNumGPUs());
}

absl::StatusOr<c10::Device> ResolveDevice(const std::string& flag, int local_rank) {
  if (flag == "cpu") return c10::Device(c10::kCPU);
  const int gpus = VisibleCudaDevices();
  if (flag == "auto" || flag.empty()) {
    if (gpus == 0) return c10::Device(c10::kCPU);
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(local_rank % gpus));
  }
  int index = -1;
  if (flag == "cuda") {
    index = gpus > 0 ? local_rank % gpus : 0;
  } else if (flag.rfind("cuda:", 0) == 0) {
    if (!absl::SimpleAtoi(flag.substr(5), &index) || index < 0) {
      return absl::InvalidArgumentError(absl::StrCat("--device: '", flag, "' is not cuda:N with N >= 0"));
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--device must be auto, cpu, cuda or cuda:N, got '", flag, "'"));
  }
  if (!at::hasCUDA()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device ", flag,
                     ": this shardlm is built against a libtorch without CUDA (the CPU build); "
                     "build the CUDA variant (docs/gpu.md) or use --device cpu"));
  }
  if (index >= gpus) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--device ", flag, ": GPU ", index, " is not visible (", gpus, " visible; CUDA_VISIBLE_DEVICES=",
        std::getenv("CUDA_VISIBLE_DEVICES") != nullptr ? std::getenv("CUDA_VISIBLE_DEVICES") : "unset", ")"));
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

}  // namespace shardlm
