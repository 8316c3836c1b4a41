// Reads one rank's shard of a checkpoint tensor into an at::Tensor.
//
// Only the shard's bytes are read: a dim-0 slice is one contiguous range of
// the memory-mapped file, a dim-1 slice is one range per row. The result is
// an owned tensor in the compute dtype, so the Checkpoint (and its mapping)
// can be closed once the model is loaded.
//
//   SHARDLM_ASSIGN_OR_RETURN(at::Tensor w,
//       LoadShard(ckpt, plan, "model.layers.0.mlp.up_proj.weight", at::kBFloat16));
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint.h"
#include "partitioning/shard_plan.h"

namespace shardlm {

// `expected_shape` is the full (unsharded) shape; a mismatch is InvalidArgument
// naming the tensor.
absl::StatusOr<at::Tensor> LoadShard(const Checkpoint& ckpt, const ShardPlan& plan, const std::string& name,
                                     const std::vector<int64_t>& expected_shape, at::ScalarType dtype);

}  // namespace shardlm
