// The compute device of a rank: `--device cpu|cuda|cuda:N|auto`.
//
//   auto     cuda when this build's libtorch has CUDA and a GPU is visible, else cpu
//   cuda     GPU (local_rank mod visible GPUs): `serve --tp N` gives rank r GPU r
//   cuda:N   that GPU
//
// Errors name the flag and why: a CPU-only build, no GPU visible, an index past
// the visible count.
//
//   SHARDLM_ASSIGN_OR_RETURN(at::Device d, ResolveDevice("cuda", /*local_rank=*/1));
#pragma once

#include <c10/core/Device.h>

#include <string>

#include "absl/status/statusor.h"

namespace shardlm {

absl::StatusOr<c10::Device> ResolveDevice(const std::string& flag, int local_rank = 0);

// CUDA devices this process can use (0 in a CPU-only build or without a GPU).
int VisibleCudaDevices();

}  // namespace shardlm
