// Paged attention on an NVIDIA GPU, for decode rows and prompt-chunk rows
// alike: each computed row attends to its sequence's keys in the paged KV
// pool, through the block table, up to and including its own position.
//
//   out[t, h] = softmax(scale * q[t, h] . k[j] over j) . v[j]    j in [first, p]
//
// The same computation as kernels/attention.cc on the CPU: f32
// arithmetic whatever the storage type, the output rounded once. Plain C++
// (no CUDA or torch headers), so callers built without nvcc can include it.
#pragma once

#include <cstdint>

namespace shardlm::kernels::cuda {

enum class DType { kF32, kBF16 };

struct PagedAttentionParams {
  DType dtype = DType::kF32;
  // Queries, dtype[tokens, heads, head_dim] viewed with strides in elements:
  // q + t * q_row_stride + h * q_head_stride + i (a view into the qkv projection will do).
  const void* q = nullptr;
  int64_t q_row_stride = 0;
  int64_t q_head_stride = 0;
  // One layer's KV pool, dtype[num_blocks, block_size, kv_heads, head_dim], contiguous and
  // 16-byte aligned: the key of slot s, kv head g, element i is k[(s * kv_heads + g) * head_dim + i].
  const void* k = nullptr;
  const void* v = nullptr;
  // Output, dtype[tokens, heads, head_dim] contiguous and 16-byte aligned:
  // out + (t * heads + h) * head_dim + i.
  void* out = nullptr;
  // Device arrays (int32): the token rows to compute (num_rows of them; only these rows of out
  // are written; null: rows 0 .. num_rows - 1), each token's position and sequence index, and the block
  // tables int32[num_seqs, max_blocks]. Table entries for blocks a row does not see are never read.
  const int32_t* rows = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* seq_of_token = nullptr;
  const int32_t* block_tables = nullptr;
  int32_t max_blocks = 0;
  // When set, a device int32 holding the tables' row stride, read in place of
  // max_blocks (which then only bounds it): a CUDA graph captures the pointer,
  // so each replay's tables can be as wide as that step needs.
  const int32_t* block_table_stride = nullptr;
  int32_t block_size = 16;
  int32_t num_rows = 0, heads = 0, kv_heads = 0, head_dim = 0;
  // Query head h reads KV head (h + q_head_offset) / kv_group; kv_group 0 means
  // heads / kv_heads with offset 0. A rank of an uneven tensor-parallel split has
  // groups cut at its ends (partitioning/shard_plan.h).
  int32_t kv_group = 0, q_head_offset = 0;
  float scale = 1.0f;          // usually 1/sqrt(head_dim)
  int32_t sliding_window = 0;  // 0 = none; else row at position p sees keys max(0, p-window+1) .. p
  // Split keys (flash-decoding): a row's keys are cut into up to num_splits runs of at least
  // kMinKeysPerSplit keys, each run done by a block of its own, and a second kernel merges the
  // runs' partial softmaxes. A row with too few keys for two runs is done by one block, exactly
  // as unsplit. 1: unsplit. PagedAttentionSplits chooses it; a CUDA graph keeps the choice, the
  // cut of each row follows that replay's positions.
  int32_t num_splits = 1;
  // With num_splits > 1: device f32[num_rows * heads * num_splits * (head_dim + 2)], 16-byte
  // aligned (PagedAttentionWorkspaceFloats).
  float* split_workspace = nullptr;
};

inline constexpr int kMinKeysPerSplit = 256;
inline constexpr int kMaxSplits = 32;

// The split count for a launch of p's shape on a GPU of `sm_count` multiprocessors: 1 where the
// rows and heads alone give every multiprocessor two blocks, else enough runs for that, at most
// kMaxSplits. The rows' context lengths then decide how many of those runs each row uses.
int PagedAttentionSplits(const PagedAttentionParams& p, int sm_count);

// Floats of split_workspace for p (0 when p.num_splits is 1).
int64_t PagedAttentionWorkspaceFloats(const PagedAttentionParams& p);

// True for the head sizes the kernel is built for: 32, 64, 96, 128 and 256.
bool PagedAttentionSupports(int head_dim);

// Enqueues the kernel on `stream`, a cudaStream_t (void* here to keep this
// header free of CUDA's), and the merge kernel after it when num_splits > 1. Any
// group size works; groups above 8 take one block per 8 query heads. Returns nullptr, or a static string
// describing the error: bad params, an unsupported head_dim, or the
// cudaGetErrorString of the launch error (which may be an earlier
// asynchronous error that cudaGetLastError reports first).
const char* LaunchPagedAttention(const PagedAttentionParams& p, void* stream);

}  // namespace shardlm::kernels::cuda
