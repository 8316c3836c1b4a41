// Collectives over shards of unequal size, on any Communicator.
//
// A dimension the world size does not divide is cut as evenly as possible
// (partitioning/shard_plan.h): `parts[r]` is rank r's size along `dim`, the same
// list on every rank. When all parts are equal these are the communicator's own
// operations; otherwise each shard is padded to the largest part, the equal
// collective runs, and the padding is dropped. Padding is built from ATen
// operators, so it works on every backend (shared memory, Gloo, NCCL) and under
// CUDA graph capture; it costs one copy of a shard's activations each way,
// small next to the step (the residual stream is hidden-sized rows).
//
//   // x: dtype[tokens, hidden.tp] with hidden 576 on 5 ranks: parts {116, 115, 115, 115, 115}
//   SHARDLM_ASSIGN_OR_RETURN(at::Tensor full, AllGatherParts(comm, x, 1, plan.hidden_parts()));
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"

namespace shardlm {

// Concatenates every rank's `shard` (parts[r] long along `dim`) along `dim`.
absl::StatusOr<at::Tensor> AllGatherParts(Communicator& comm, const at::Tensor& shard, int64_t dim,
                                          const std::vector<int64_t>& parts);

// As AllGatherParts, on `root` only; the other ranks get an undefined tensor.
absl::StatusOr<at::Tensor> GatherParts(Communicator& comm, const at::Tensor& shard, int64_t dim, int root,
                                       const std::vector<int64_t>& parts);

// Sums `partial` (sum(parts) long along `dim`) over ranks and returns this rank's
// part: elements [sum(parts[0..r)), + parts[r]) along `dim`.
absl::StatusOr<at::Tensor> ReduceScatterParts(Communicator& comm, const at::Tensor& partial, int64_t dim,
                                              const std::vector<int64_t>& parts);

}  // namespace shardlm
