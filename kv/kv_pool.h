// One rank's paged KV cache: its KV heads only, every layer, every block.
//
//   k, v: dtype[layers, blocks, block_size, kv_heads.tp, head_dim]
//
// Token at position p of a sequence with block table T lives in block
// T[p / block_size], row p % block_size. Sized from a memory budget.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "absl/status/statusor.h"

namespace shardlm {

struct KvPoolShape {
  int64_t num_layers = 0;
  int64_t num_blocks = 0;
  int64_t block_size = 16;
  int64_t num_kv_heads_per_rank = 0;
  int64_t head_dim = 0;
};

class KvPool {
 public:
  // Allocates (zeroed) pools of `shape.num_blocks` blocks on `device`, and
  // `scratch_blocks` more past them that the block manager never hands out
  // (CUDA graphs point their padding rows at one: model/step_graphs.h).
  static absl::StatusOr<KvPool> Create(const KvPoolShape& shape, at::ScalarType dtype,
                                       at::Device device = at::kCPU, int64_t scratch_blocks = 0);
  // Blocks that fit in `budget_bytes` (K and V, all layers).
  static int64_t BlocksForBudget(KvPoolShape shape, at::ScalarType dtype, int64_t budget_bytes);

  const KvPoolShape& shape() const { return shape_; }
  // The first block past shape().num_blocks, or -1 when there is none.
  int64_t scratch_block() const { return scratch_blocks_ > 0 ? shape_.num_blocks : -1; }
  // dtype[layers, blocks + scratch blocks, block_size, kv_heads.tp, head_dim]
  at::Tensor& k() { return k_; }
  at::Tensor& v() { return v_; }
  const at::Tensor& k() const { return k_; }

 private:
  KvPoolShape shape_;
  int64_t scratch_blocks_ = 0;
  at::Tensor k_;
  at::Tensor v_;
};

}  // namespace shardlm
