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
#include "formats/checkpoint.h"
#include "formats/quant_blocks.h"
#include "partitioning/shard_plan.h"

namespace shardlm {

// `expected_shape` is the full (unsharded) shape; a mismatch is InvalidArgument
// naming the tensor.
absl::StatusOr<at::Tensor> LoadShard(const Checkpoint& ckpt, const ShardPlan& plan, const std::string& name,
                                     const std::vector<int64_t>& expected_shape, at::ScalarType dtype);

// One rank's shard of a block-quantized matrix (GGUF Q8_0, Q4_0, Q4_1) kept
// in its blocks: `rows` uint8[rows, cols / 32 * block bytes], q/k rows in
// Hugging Face's order. `format` is kNone (and `rows` undefined) when the
// tensor is not block-quantized, or when the rank's slice of its columns
// does not start and end on a block (the caller then loads it dense).
struct QuantShard {
  BlockFormat format = BlockFormat::kNone;
  at::Tensor rows;
  int64_t cols = 0;
};
absl::StatusOr<QuantShard> LoadQuantShard(const Checkpoint& ckpt, const ShardPlan& plan,
                                          const std::string& name,
                                          const std::vector<int64_t>& expected_shape);

// Rows of f32 weights, f32[n, k] with k a multiple of 32, quantized to
// `format`'s GGUF blocks (round to nearest, as ggml's reference quantizers):
// uint8[n, k / 32 * block bytes]. For weights quantized at load (--weights).
at::Tensor QuantizeRows(BlockFormat format, const at::Tensor& rows);

}  // namespace shardlm
