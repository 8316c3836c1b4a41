// The CUDA variant: PagedAttention's device path launches
// kernels/cuda/paged_attention.cu on libtorch's current stream.
#include "kernels/cuda_attention.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <atomic>

#include "kernels/cuda/paged_attention.h"

namespace shardlm {
namespace {

std::atomic<int> g_max_splits{kernels::cuda::kMaxSplits};

}  // namespace

void SetCudaAttentionMaxSplits(int n) { g_max_splits.store(std::clamp(n, 1, kernels::cuda::kMaxSplits)); }

bool CudaPagedAttention(const at::Tensor& q, const at::Tensor& k_layer, const at::Tensor& v_layer,
                        at::Tensor& out, const AttentionBatch& b) {
  namespace kc = kernels::cuda;
  const at::ScalarType t = q.scalar_type();
  if (!CudaPagedAttentionTakes(k_layer, q.size(2)) || k_layer.scalar_type() != t ||
      !k_layer.is_contiguous() || !v_layer.is_contiguous() || !out.is_contiguous() || q.stride(2) != 1 ||
      !b.positions_dev.defined()) {
    return false;
  }
  // The launch goes to the current device: make it q's.
  const c10::cuda::CUDAGuard guard(q.device());
  const int64_t tokens = q.size(0);
  kc::PagedAttentionParams p;
  p.dtype = t == at::kFloat ? kc::DType::kF32 : kc::DType::kBF16;
  p.q = q.data_ptr();
  p.q_row_stride = q.stride(0);
  p.q_head_stride = q.stride(1);
  p.k = k_layer.data_ptr();
  p.v = v_layer.data_ptr();
  p.out = out.data_ptr();
  p.rows = nullptr;  // every row of the step: decode rows and prompt chunks alike
  p.positions = b.positions_dev.data_ptr<int32_t>();
  p.seq_of_token = b.seq_of_token_dev.data_ptr<int32_t>();
  p.block_tables = b.block_tables_dev.data_ptr<int32_t>();
  p.max_blocks = static_cast<int32_t>(b.max_blocks);
  if (b.table_stride_dev.defined()) p.block_table_stride = b.table_stride_dev.data_ptr<int32_t>();
  p.block_size = static_cast<int32_t>(b.block_size);
  p.num_rows = static_cast<int32_t>(tokens);
  p.heads = static_cast<int32_t>(q.size(1));
  p.kv_heads = static_cast<int32_t>(k_layer.size(2));
  p.head_dim = static_cast<int32_t>(q.size(2));
  p.scale = 1.0f / std::sqrt(static_cast<float>(q.size(2)));
  p.sliding_window = static_cast<int32_t>(b.sliding_window);
  p.kv_group = static_cast<int32_t>(b.kv_group);
  p.q_head_offset = static_cast<int32_t>(b.q_head_offset);
  // Split keys where the rows and heads alone leave multiprocessors idle (a small batch): each
  // long row's keys spread over several blocks. The workspace comes from libtorch's allocator (a
  // CUDA graph's pool during capture).
  p.num_splits =
      std::min(g_max_splits.load(std::memory_order_relaxed),
               kc::PagedAttentionSplits(p, at::cuda::getCurrentDeviceProperties()->multiProcessorCount));
  at::Tensor workspace;
  if (p.num_splits > 1) {
    workspace = at::empty({kc::PagedAttentionWorkspaceFloats(p)}, q.options().dtype(at::kFloat));
    p.split_workspace = workspace.data_ptr<float>();
  }
  const char* err = kc::LaunchPagedAttention(p, c10::cuda::getCurrentCUDAStream(q.device().index()).stream());
  TORCH_CHECK(err == nullptr, "CUDA paged attention: ", err);
  return true;
}

bool HaveCudaKernels() { return true; }

bool CudaPagedAttentionTakes(const at::Tensor& pool, int64_t head_dim) {
  const at::ScalarType t = pool.scalar_type();
  return pool.is_cuda() && (t == at::kFloat || t == at::kBFloat16) &&
         kernels::cuda::PagedAttentionSupports(static_cast<int>(head_dim));
}

}  // namespace shardlm
