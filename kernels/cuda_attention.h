// The CUDA paged-attention kernel (kernels/cuda/paged_attention.cu) behind
// PagedAttention's device path.
//
// A CUDA build (SHARDLM_CUDA) compiles cuda_attention.cc, which launches the
// kernel on libtorch's current stream over the batch's device arrays; the
// CPU build compiles cuda_attention_stub.cc, which has no kernel. Either way
// false means "not handled here": the caller computes the attention with ATen
// operators instead.
#pragma once

#include <ATen/core/Tensor.h>

#include "kernels/attention.h"

namespace shardlm {

// q, out: dtype[tokens, heads.tp, head_dim] (heads contiguous); k_layer,
// v_layer: one layer of the pool. Fills every row of `out`.
bool CudaPagedAttention(const at::Tensor& q, const at::Tensor& k_layer, const at::Tensor& v_layer,
                        at::Tensor& out, const AttentionBatch& batch);

// At most n runs of keys per row (split keys, kernels/cuda/paged_attention.h); 1 never splits.
// kMaxSplits by default; main sets it before any step runs (shardlm_bench measures with it).
void SetCudaAttentionMaxSplits(int n);

// Whether this build has the CUDA kernels.
bool HaveCudaKernels();
// Whether CudaPagedAttention takes a step over this pool (a CUDA tensor of
// f32 or bf16) and head size; when not, the caller's ATen path needs the
// runs' key slots (PrepareDeviceBatch).
bool CudaPagedAttentionTakes(const at::Tensor& pool, int64_t head_dim);

}  // namespace shardlm
