#include "kv/kv_pool.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace shardlm {

absl::StatusOr<KvPool> KvPool::Create(const KvPoolShape& shape, at::ScalarType dtype, at::Device device,
                                      int64_t scratch_blocks) {
  if (shape.num_blocks <= 0) {
    return absl::ResourceExhaustedError("KV cache budget holds no block; raise --kv-cache-mb");
  }
  KvPool pool;
  pool.shape_ = shape;
  pool.scratch_blocks_ = std::max<int64_t>(0, scratch_blocks);
  SHARDLM_RETURN_IF_ERROR(CatchTorchErrors("allocating the KV pool", [&]() -> absl::Status {
    const std::vector<int64_t> dims = {shape.num_layers, shape.num_blocks + pool.scratch_blocks_,
                                       shape.block_size, shape.num_kv_heads_per_rank, shape.head_dim};
    pool.k_ = at::zeros(dims, at::TensorOptions().dtype(dtype).device(device));
    pool.v_ = at::zeros(dims, at::TensorOptions().dtype(dtype).device(device));
    return absl::OkStatus();
  }));
  return pool;
}

int64_t KvPool::BlocksForBudget(KvPoolShape shape, at::ScalarType dtype, int64_t budget_bytes) {
  const int64_t per_block = 2 * shape.num_layers * shape.block_size * shape.num_kv_heads_per_rank *
                            shape.head_dim * static_cast<int64_t>(c10::elementSize(dtype));
  return per_block > 0 ? budget_bytes / per_block : 0;
}

}  // namespace shardlm
