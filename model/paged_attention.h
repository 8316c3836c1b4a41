// Causal attention of a flattened, unpadded batch against the paged KV pool.
//
// For each query row t (sequence s = seq_of_token[t], position p =
// positions[t]) and each local query head h, attends to the keys at positions
// [max(0, p - window + 1), p] of sequence s, read through its block table.
// GQA: query head h reads KV head h / (heads_per_rank / kv_heads_per_rank).
// Softmax in f32 whatever the storage dtype.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace shardlm {

struct AttentionBatch {
  const std::vector<int32_t>* positions = nullptr;     // int32[tokens]
  const std::vector<int32_t>* seq_of_token = nullptr;  // int32[tokens]
  const int32_t* block_tables = nullptr;               // int32[seqs, max_blocks]
  int64_t max_blocks = 0;
  int64_t block_size = 16;
  int64_t sliding_window = 0;  // 0 = full attention
};

// Writes k, v (dtype[tokens, kv_heads.tp, head_dim]) into the pool layer
// (dtype[blocks, block_size, kv_heads.tp, head_dim]) at each token's slot.
void WriteKv(const at::Tensor& k, const at::Tensor& v, at::Tensor& k_layer, at::Tensor& v_layer,
             const AttentionBatch& batch);

// q: dtype[tokens, heads.tp, head_dim] -> dtype[tokens, heads.tp, head_dim]
at::Tensor PagedAttention(const at::Tensor& q, const at::Tensor& k_layer, const at::Tensor& v_layer,
                          const AttentionBatch& batch);

}  // namespace shardlm
