// Paged attention on the GPU (kernels/cuda/paged_attention.h). One thread
// block per (row, KV head, pass of up to 8 query heads) computes every query
// head of the group that shares the KV head, so each key and value row is
// read once per group (GQA), not once per query head.
//
// Layout: lane l of each warp owns elements [l * D/32, (l + 1) * D/32) of
// q, k, v and the accumulators, loaded in runs of up to 16 bytes. The
// block's warps take turns over tiles of KT keys (warp w: tiles w, w + W,
// ...); per key a dot product per head is summed across the warp by
// shuffles, and an online softmax (running max and sum, f32) rescales the
// accumulators once per tile, so any context length fits in registers.
// At the end each warp leaves (max, sum, acc) in shared memory and the block
// merges them into the output.
//
// Split keys (flash-decoding): with num_splits > 1 the grid has that many
// blocks per (row, KV head, pass) along z, and a row with a long context cuts
// its keys into runs of at least kMinKeysPerSplit, one block each. Such a
// block leaves its merged but unnormalized (max, sum, acc) in the workspace;
// MergeSplitsKernel then combines a row's runs the way the warps are
// combined. A row too short for two runs is finished by its first block as if
// unsplit, and the merge kernel leaves it alone.
//
// Scores are kept in log2 units (q pre-multiplied by scale * log2(e)) so
// the exponentials are exp2f; the result matches the CPU's exp to f32 rounding.

// Relative to this file, so it also builds standalone without -I.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "paged_attention.h"

namespace shardlm::kernels::cuda {
namespace {

constexpr int kMaxGroup = 8;  // query heads per block; larger groups take several passes
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// A lane's run of N elements moves in the widest chunk its size allows, at
// most 16 bytes; runs start at multiples of their size from a 16-byte
// aligned base, so each chunk is aligned. Elements and chunks meet through
// memcpy (free in registers): a pointer cast would break strict aliasing.
template <int Bytes>
struct RawOf;
template <>
struct RawOf<16> {
  using type = uint4;
};
template <>
struct RawOf<8> {
  using type = uint2;
};
template <>
struct RawOf<4> {
  using type = uint32_t;
};
template <>
struct RawOf<2> {
  using type = uint16_t;
};

template <typename T, int N>
struct Run {
  static_assert(std::is_trivially_copyable_v<T>, "runs are copied bytewise");
  static constexpr int kBytes = N * static_cast<int>(sizeof(T));
  static constexpr int kChunk = (kBytes & -kBytes) < 16 ? (kBytes & -kBytes) : 16;
  static constexpr int kPer = kChunk / static_cast<int>(sizeof(T));
  using Raw = typename RawOf<kChunk>::type;
};

template <typename T, int N>
__device__ __forceinline__ void LoadRun(const T* p, float (&x)[N]) {
  using R = Run<T, N>;
#pragma unroll
  for (int c = 0; c < N; c += R::kPer) {
    const typename R::Raw raw = *reinterpret_cast<const typename R::Raw*>(p + c);
    T e[R::kPer];
    memcpy(e, &raw, sizeof(raw));
#pragma unroll
    for (int i = 0; i < R::kPer; ++i) x[c + i] = ToFloat(e[i]);
  }
}

template <typename T, int N>
__device__ __forceinline__ void StoreRun(T* p, const float (&x)[N]) {
  using R = Run<T, N>;
#pragma unroll
  for (int c = 0; c < N; c += R::kPer) {
    T e[R::kPer];
#pragma unroll
    for (int i = 0; i < R::kPer; ++i) e[i] = FromFloat<T>(x[c + i]);
    typename R::Raw raw;
    memcpy(&raw, e, sizeof(raw));
    *reinterpret_cast<typename R::Raw*>(p + c) = raw;
  }
}

__device__ __forceinline__ float WarpSum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// How many runs of keys a row of `keys` keys uses when a launch allows `splits`.
__host__ __device__ __forceinline__ int RunsOf(int keys, int splits) {
  if (splits <= 1 || keys < 2 * kMinKeysPerSplit) return 1;
  return min(splits, keys / kMinKeysPerSplit);
}

// The first key a row at `pos` sees.
__device__ __forceinline__ int FirstKey(const PagedAttentionParams& p, int pos) {
  return p.sliding_window > 0 ? max(0, pos - p.sliding_window + 1) : 0;
}

// Where a row's runs leave their partial results: acc f32[rows, heads, splits, D], then
// (max, sum) f32[rows, heads, splits, 2].
__device__ __forceinline__ float* RunAcc(const PagedAttentionParams& p, int r, int h, int split) {
  return p.split_workspace + ((static_cast<int64_t>(r) * p.heads + h) * p.num_splits + split) * p.head_dim;
}
__device__ __forceinline__ float* RunStats(const PagedAttentionParams& p, int r, int h, int split) {
  return p.split_workspace + static_cast<int64_t>(p.num_rows) * p.heads * p.num_splits * p.head_dim +
         ((static_cast<int64_t>(r) * p.heads + h) * p.num_splits + split) * 2;
}

// Warps per block: 8, or 4 where a warp's accumulators for G heads of size
// D would take the merge buffer past 32 KB of shared memory.
__host__ __device__ constexpr int WarpsFor(int D, int G) { return G * D <= 1024 ? 8 : 4; }

// Row t's queries of heads h0.. (this lane's elements, scaled for exp2) and
// an empty online softmax for each. Heads past nh (a group that is not a
// power of two) get q = 0 and are not written.
template <typename T, int G, int E>
__device__ __forceinline__ void StartSoftmax(const PagedAttentionParams& p, int64_t t, int lane, int h0,
                                             int nh, float (&q)[G][E], float (&acc)[G][E], float (&m)[G],
                                             float (&l)[G]) {
  const T* qrow = static_cast<const T*>(p.q) + t * p.q_row_stride + lane * E;
  const float qscale = p.scale * kLog2e;
#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int e = 0; e < E; ++e) {
      q[g][e] = g < nh ? ToFloat(qrow[(h0 + g) * p.q_head_stride + e]) * qscale : 0.0f;
      acc[g][e] = 0.0f;
    }
    m[g] = -INFINITY;
    l[g] = 0.0f;
  }
}

// One tile of KT keys (kf, vf: this lane's elements of each) into the online
// softmax of each of the G heads: scores, the running max m, sum l and the
// weighted values acc. Keys past key_end score -inf and weigh nothing.
template <int G, int E, int KT>
__device__ __forceinline__ void AccumulateTile(const float (&q)[G][E], const float (&kf)[KT][E],
                                               const float (&vf)[KT][E], int j0, int key_end, float (&m)[G],
                                               float (&l)[G], float (&acc)[G][E]) {
#pragma unroll
  for (int g = 0; g < G; ++g) {
    float s[KT];
    float tile_max = m[g];
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) {
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) dot = fmaf(q[g][e], kf[kk][e], dot);
      s[kk] = j0 + kk <= key_end ? WarpSum(dot) : -INFINITY;
      tile_max = fmaxf(tile_max, s[kk]);
    }
    // tile_max is finite (the tile's first key is in range); exp2f(-inf) = 0 on the first tile.
    const float alpha = exp2f(m[g] - tile_max);
    m[g] = tile_max;
    l[g] *= alpha;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[g][e] *= alpha;
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) {
      const float w = exp2f(s[kk] - tile_max);
      l[g] += w;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] = fmaf(w, vf[kk][e], acc[g][e]);
    }
  }
}

// Head g's W warp partials (in shared memory) merged, each rescaled to their
// common max: this lane's unnormalized output o, the max mx and the sum.
template <int W, int G, int D>
__device__ __forceinline__ void MergeWarps(const float (&merge_acc)[W][G][D], const float (&merge_max)[W][G],
                                           const float (&merge_sum)[W][G], int g, int lane,
                                           float (&o)[D / 32], float& mx, float& sum) {
  constexpr int E = D / 32;
  mx = -INFINITY;
#pragma unroll
  for (int w = 0; w < W; ++w) mx = fmaxf(mx, merge_max[w][g]);
  float part[E];
  sum = 0.0f;
#pragma unroll
  for (int e = 0; e < E; ++e) o[e] = 0.0f;
#pragma unroll
  for (int w = 0; w < W; ++w) {
    const float c = merge_max[w][g] == -INFINITY ? 0.0f : exp2f(merge_max[w][g] - mx);
    sum += c * merge_sum[w][g];
    LoadRun(&merge_acc[w][g][lane * E], part);
#pragma unroll
    for (int e = 0; e < E; ++e) o[e] = fmaf(c, part[e], o[e]);
  }
}

// Head h of row t, merged over this block's warps (o unnormalized, with its
// max and sum): the output when the row's keys are one run, else this run's
// part for MergeSplitsKernel.
template <typename T, int D>
__device__ __forceinline__ void WriteHead(const PagedAttentionParams& p, int64_t t, int h, int split,
                                          int runs, int lane, float (&o)[D / 32], float mx, float sum) {
  constexpr int E = D / 32;
  if (runs > 1) {
    StoreRun(RunAcc(p, blockIdx.x, h, split) + lane * E, o);
    if (lane == 0) {
      RunStats(p, blockIdx.x, h, split)[0] = mx;
      RunStats(p, blockIdx.x, h, split)[1] = sum;
    }
    return;
  }
  // No keys at all (a negative position) gives zeros rather than NaN.
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
  for (int e = 0; e < E; ++e) o[e] *= inv;
  StoreRun(static_cast<T*>(p.out) + (t * p.heads + h) * D + lane * E, o);
}

// T: float or __nv_bfloat16; D: head size (a multiple of 32); G: query heads
// per block (the group, rounded up to a power of two, at most kMaxGroup).
template <typename T, int D, int G>
__global__ void __launch_bounds__(WarpsFor(D, G) * 32) PagedAttentionKernel(const PagedAttentionParams p) {
  constexpr int W = WarpsFor(D, G), E = D / 32;
  // Keys per warp step: several loads in flight per lane (up to 16 elements
  // of k and of v), for 8 to 2 keys as D goes from 32 to 256.
  constexpr int KT = 16 / E > 8 ? 8 : 16 / E;
  alignas(16) __shared__ float merge_acc[W][G][D];  // aligned for StoreRun's 16-byte chunks
  __shared__ float merge_max[W][G], merge_sum[W][G];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = p.rows != nullptr ? p.rows[blockIdx.x] : blockIdx.x;
  const int group = p.kv_group, passes = (group + G - 1) / G;
  const int kvh = blockIdx.y / passes, pass = blockIdx.y % passes;
  // This KV head's query heads [first_head, end_head): a whole group, or part of one at a rank's ends.
  const int first_head = max(0, kvh * group - p.q_head_offset);
  const int end_head = min(p.heads, (kvh + 1) * group - p.q_head_offset);
  const int h0 = first_head + pass * G;  // first query head of this block
  const int nh = min(G, end_head - h0);
  if (nh <= 0) return;  // the same for the whole block: a cut group needs fewer passes
  const int seq = p.seq_of_token[t], pos = p.positions[t];
  const int first_key = FirstKey(p, pos);
  // This block's run of keys [key_begin, key_end]: all of them when unsplit.
  const int runs = RunsOf(pos - first_key + 1, p.num_splits), split = blockIdx.z;
  if (split >= runs) return;  // the same for the whole block
  const int chunk = (pos - first_key + runs) / runs;
  const int key_begin = first_key + split * chunk;
  const int key_end = runs == 1 ? pos : min(pos, key_begin + chunk - 1);
  const int64_t table_stride = p.block_table_stride != nullptr ? *p.block_table_stride : p.max_blocks;
  const int32_t* table = p.block_tables + static_cast<int64_t>(seq) * table_stride;
  const int64_t slot_stride = static_cast<int64_t>(p.kv_heads) * D;
  const T* kbase = static_cast<const T*>(p.k) + kvh * D + lane * E;
  const T* vbase = static_cast<const T*>(p.v) + kvh * D + lane * E;

  float q[G][E], acc[G][E], m[G], l[G];
  StartSoftmax<T, G, E>(p, t, lane, h0, nh, q, acc, m, l);

  for (int j0 = key_begin + warp * KT; j0 <= key_end; j0 += W * KT) {
    // Keys past the run's end in the last tile are neither loaded nor weighted.
    float kf[KT][E], vf[KT][E];
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) {
      const int j = j0 + kk;
      if (j <= key_end) {
        const int64_t slot = static_cast<int64_t>(table[j / p.block_size]) * p.block_size + j % p.block_size;
        LoadRun(kbase + slot * slot_stride, kf[kk]);
        LoadRun(vbase + slot * slot_stride, vf[kk]);
      } else {
#pragma unroll
        for (int e = 0; e < E; ++e) kf[kk][e] = vf[kk][e] = 0.0f;
      }
    }
    AccumulateTile<G, E, KT>(q, kf, vf, j0, key_end, m, l, acc);
  }

  // Merge the warps' partial softmaxes: rescale each to the block's max.
  // A warp that saw no keys has max -inf and contributes nothing.
#pragma unroll
  for (int g = 0; g < G; ++g) {
    StoreRun(&merge_acc[warp][g][lane * E], acc[g]);
    if (lane == 0) {
      merge_max[warp][g] = m[g];
      merge_sum[warp][g] = l[g];
    }
  }
  __syncthreads();
  for (int g = warp; g < nh; g += W) {
    float o[E], mx, sum;
    MergeWarps<W, G, D>(merge_acc, merge_max, merge_sum, g, lane, o, mx, sum);
    WriteHead<T, D>(p, t, h0 + g, split, runs, lane, o, mx, sum);
  }
}

// One block per (row, query head) of a launch with num_splits > 1: combines the row's runs,
// each rescaled from its own max to theirs, into the output. Rows of one run are done already.
template <typename T>
__global__ void MergeSplitsKernel(const PagedAttentionParams p) {
  const int r = blockIdx.x, h = blockIdx.y;
  const int64_t t = p.rows != nullptr ? p.rows[r] : r;
  const int pos = p.positions[t];
  const int runs = RunsOf(pos - FirstKey(p, pos) + 1, p.num_splits);
  if (runs == 1) return;
  float mx = -INFINITY;
  for (int s = 0; s < runs; ++s) mx = fmaxf(mx, RunStats(p, r, h, s)[0]);
  for (int i = threadIdx.x; i < p.head_dim; i += blockDim.x) {
    float o = 0.0f, sum = 0.0f;
    for (int s = 0; s < runs; ++s) {
      const float* stats = RunStats(p, r, h, s);
      const float c = stats[0] == -INFINITY ? 0.0f : exp2f(stats[0] - mx);
      sum += c * stats[1];
      o = fmaf(c, RunAcc(p, r, h, s)[i], o);
    }
    static_cast<T*>(p.out)[(t * p.heads + h) * p.head_dim + i] = FromFloat<T>(sum > 0.0f ? o / sum : 0.0f);
  }
}

template <typename T, int D, int G>
const char* Launch(const PagedAttentionParams& p, cudaStream_t stream) {
  const int passes = (p.kv_group + G - 1) / G;
  if (static_cast<int64_t>(p.kv_heads) * passes > 65535) return "paged attention: too many KV heads";
  const dim3 grid(static_cast<unsigned>(p.num_rows), static_cast<unsigned>(p.kv_heads * passes),
                  static_cast<unsigned>(p.num_splits));
  PagedAttentionKernel<T, D, G><<<grid, WarpsFor(D, G) * 32, 0, stream>>>(p);
  if (p.num_splits > 1) {
    const dim3 merge_grid(static_cast<unsigned>(p.num_rows), static_cast<unsigned>(p.heads));
    MergeSplitsKernel<T><<<merge_grid, D < 128 ? D : 128, 0, stream>>>(p);
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

// The smallest instantiated group size that holds the group; larger groups
// take passes of kMaxGroup heads.
template <typename T, int D>
const char* LaunchForHeadDim(const PagedAttentionParams& p, cudaStream_t stream) {
  const int group = p.kv_group;
  if (group <= 1) return Launch<T, D, 1>(p, stream);
  if (group <= 2) return Launch<T, D, 2>(p, stream);
  if (group <= 4) return Launch<T, D, 4>(p, stream);
  return Launch<T, D, kMaxGroup>(p, stream);
}

template <typename T>
const char* LaunchForType(const PagedAttentionParams& p, cudaStream_t stream) {
  switch (p.head_dim) {
    case 32:
      return LaunchForHeadDim<T, 32>(p, stream);
    case 64:
      return LaunchForHeadDim<T, 64>(p, stream);
    case 96:
      return LaunchForHeadDim<T, 96>(p, stream);
    case 128:
      return LaunchForHeadDim<T, 128>(p, stream);
    case 256:
      return LaunchForHeadDim<T, 256>(p, stream);
    default:
      return "paged attention: unsupported head_dim";
  }
}

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

int PagedAttentionSplits(const PagedAttentionParams& p, int sm_count) {
  const int group = p.kv_group > 0 ? p.kv_group : (p.kv_heads > 0 ? std::max(1, p.heads / p.kv_heads) : 1);
  const int g = group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : kMaxGroup;
  const int64_t blocks = static_cast<int64_t>(p.num_rows) * p.kv_heads * ((group + g - 1) / g);
  const int64_t want = 2 * static_cast<int64_t>(sm_count);
  if (blocks <= 0 || blocks >= want) return 1;
  return static_cast<int>(std::min<int64_t>(kMaxSplits, (want + blocks - 1) / blocks));
}

int64_t PagedAttentionWorkspaceFloats(const PagedAttentionParams& p) {
  if (p.num_splits <= 1) return 0;
  return static_cast<int64_t>(p.num_rows) * p.heads * p.num_splits * (p.head_dim + 2);
}

bool PagedAttentionSupports(int head_dim) {
  return head_dim == 32 || head_dim == 64 || head_dim == 96 || head_dim == 128 || head_dim == 256;
}

const char* LaunchPagedAttention(const PagedAttentionParams& params, void* stream) {
  if (params.num_rows < 0) return "paged attention: negative num_rows";
  if (params.num_rows == 0) return nullptr;
  PagedAttentionParams p = params;
  if (p.kv_group == 0) {  // equal groups
    if (p.heads <= 0 || p.kv_heads <= 0 || p.heads % p.kv_heads != 0) {
      return "paged attention: heads must be a positive multiple of kv_heads";
    }
    p.kv_group = p.heads / p.kv_heads;
    p.q_head_offset = 0;
  }
  // Every query head must read a KV head inside [0, kv_heads).
  if (p.heads <= 0 || p.kv_heads <= 0 || p.kv_group <= 0 || p.q_head_offset < 0 ||
      p.q_head_offset >= p.kv_group || (p.heads - 1 + p.q_head_offset) / p.kv_group >= p.kv_heads) {
    return "paged attention: kv_group and q_head_offset map query heads outside the KV heads";
  }
  if (p.block_size <= 0 || p.max_blocks <= 0) return "paged attention: bad block_size or max_blocks";
  if (p.sliding_window < 0) return "paged attention: negative sliding_window";
  if (p.q == nullptr || p.k == nullptr || p.v == nullptr || p.out == nullptr || p.positions == nullptr ||
      p.seq_of_token == nullptr || p.block_tables == nullptr) {
    return "paged attention: null pointer";
  }
  if (!Aligned16(p.k) || !Aligned16(p.v) || !Aligned16(p.out)) {
    return "paged attention: k, v and out must be 16-byte aligned";
  }
  if (!PagedAttentionSupports(p.head_dim)) return "paged attention: unsupported head_dim";
  if (p.num_splits < 1 || p.num_splits > kMaxSplits)
    return "paged attention: num_splits outside [1, kMaxSplits]";
  if (p.num_splits > 1 && (p.split_workspace == nullptr || !Aligned16(p.split_workspace))) {
    return "paged attention: num_splits > 1 needs a 16-byte aligned split_workspace";
  }
  const auto s = static_cast<cudaStream_t>(stream);
  return p.dtype == DType::kF32 ? LaunchForType<float>(p, s) : LaunchForType<__nv_bfloat16>(p, s);
}

}  // namespace shardlm::kernels::cuda
