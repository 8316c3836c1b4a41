// Causal attention of a flattened, unpadded batch against the paged KV pool.
//
// For each query row t (sequence s = seq_of_token[t], position p =
// positions[t]) and each local query head h, attends to the keys at positions
// [max(0, p - window + 1), p] of sequence s, read through its block table.
// GQA: local query head h reads local KV head (h + q_head_offset) / kv_group
// (AttentionBatch; by default kv_group = heads / kv_heads and offset 0, i.e.
// equal groups; an uneven tensor-parallel split gives a rank groups that are
// cut at its ends, partitioning/shard_plan.h).
// Softmax in f32 whatever the storage dtype.
//
// The one attention interface of the forward pass, whatever the device: on
// the CPU the vector kernels of cpu/attention.h per (row, KV head) where they
// take the shape, else a portable loop; on a GPU the CUDA kernel
// (cuda_attention.h over cuda/paged_attention.h) where it takes the pool,
// else ATen operators.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace shardlm {

// The keys one run of a sequence's consecutive rows reads: positions
// [kstart, ctx), whose slots are key_slots[key_offset, key_offset + ctx - kstart).
struct KeyRun {
  int64_t begin = 0, end = 0;  // the run's token rows
  int64_t kstart = 0, ctx = 0;
  int64_t key_offset = 0;
};

struct AttentionBatch {
  const std::vector<int32_t>* positions = nullptr;     // int32[tokens]
  const std::vector<int32_t>* seq_of_token = nullptr;  // int32[tokens]
  const int32_t* block_tables = nullptr;               // int32[seqs, max_blocks]
  int64_t max_blocks = 0;
  int64_t block_size = 16;
  int64_t sliding_window = 0;  // 0 = full attention
  // Which KV head each local query head reads: (h + q_head_offset) / kv_group.
  // kv_group 0 means heads / kv_heads with offset 0 (every group whole).
  int64_t kv_group = 0;
  int64_t q_head_offset = 0;

  // The ATen-operator path (kernels::UseAtenOps: a GPU, or forced in tests)
  // reads these tensors on the pool's device instead; PrepareDeviceBatch
  // fills the host parts and StepUpload carries the arrays.
  std::vector<KeyRun> runs;
  at::Tensor slots;             // int64[tokens]: each token's KV slot
  at::Tensor key_slots;         // int64[keys of all runs]
  at::Tensor positions_dev;     // int32[tokens]   (for a device kernel)
  at::Tensor seq_of_token_dev;  // int32[tokens]
  at::Tensor block_tables_dev;  // int32[seqs * max_blocks]
  // int32[1] or undefined: the tables' row stride on the device, read by the
  // kernel in place of max_blocks (then only a bound). A CUDA graph
  // (model/step_graphs.h) captures it, and each replay's tables are as wide
  // as that step needs.
  at::Tensor table_stride_dev;
};

// The local query heads [first, end) that read local KV head `kv_head`.
struct HeadRange {
  int64_t first = 0, end = 0;
};
HeadRange QueryHeadsOf(const AttentionBatch& batch, int64_t kv_head, int64_t heads, int64_t kv_heads);

// The host arrays of the ATen path: each token's slot and, with `with_keys`
// (when a device kernel will not read the block tables itself), the runs
// (into `batch`) and every run's key slots; to be uploaded into batch.slots
// and batch.key_slots.
void PrepareDeviceBatch(AttentionBatch& batch, std::vector<int64_t>& slots, std::vector<int64_t>& key_slots,
                        bool with_keys);

// Writes k, v (dtype[tokens, kv_heads.tp, head_dim]) into the pool layer
// (dtype[blocks, block_size, kv_heads.tp, head_dim]) at each token's slot.
void WriteKv(const at::Tensor& k, const at::Tensor& v, at::Tensor& k_layer, at::Tensor& v_layer,
             const AttentionBatch& batch);

// q: dtype[tokens, heads.tp, head_dim] -> dtype[tokens, heads.tp, head_dim]
at::Tensor PagedAttention(const at::Tensor& q, const at::Tensor& k_layer, const at::Tensor& v_layer,
                          const AttentionBatch& batch);

// One layer's attention from its qkv projection: writes each token's K and V
// heads (qkv: dtype[tokens, (heads + 2 kv_heads) * head_dim], rows may be
// strided) into layer `layer` of the pools (dtype[layers, blocks, block_size,
// kv_heads, head_dim]) and returns dtype[tokens, heads * head_dim]. On the
// CPU with the vector kernel it works on pointers: the dozen tensor views a
// layer would make otherwise cost about 0.1 ms of a step. Elsewhere it is
// WriteKv and PagedAttention on views; `kv_written` says the K and V heads are
// in the pool already (a device's rotary wrote them: kernels::CudaRotaryKvInPlace).
at::Tensor AttendLayer(const at::Tensor& qkv, int64_t heads, int64_t kv_heads, int64_t head_dim,
                       at::Tensor& k_pool, at::Tensor& v_pool, int64_t layer, const AttentionBatch& batch,
                       bool kv_written = false);

}  // namespace shardlm
