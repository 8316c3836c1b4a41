#include "kernels/attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/cpu/attention.h"
#include "kernels/cuda_attention.h"
#include "kernels/fused.h"
#include "kernels/parallel.h"

namespace shardlm {
namespace {

int64_t SlotOf(const AttentionBatch& b, int64_t seq, int64_t pos) {
  const int32_t block = b.block_tables[seq * b.max_blocks + pos / b.block_size];
  return static_cast<int64_t>(block) * b.block_size + pos % b.block_size;
}

// The first key position a row at position p sees.
int64_t FirstKey(const AttentionBatch& b, int64_t p) {
  return b.sliding_window > 0 ? std::max<int64_t>(0, p - b.sliding_window + 1) : 0;
}

// Appends the slots of sequence `seq`'s positions [from, to) to `slots`.
void AppendKeySlots(const AttentionBatch& b, int64_t seq, int64_t from, int64_t to,
                    std::vector<int64_t>& slots) {
  slots.reserve(slots.size() + std::max<int64_t>(0, to - from));
  for (int64_t j = from; j < to; ++j) slots.push_back(SlotOf(b, seq, j));
}

// Copies each token's K and V rows (`bytes` each, token t's at k_src + t *
// src_stride and v_src + t * src_stride) to its slot of the pool layer.
void CopyKvToSlots(const char* k_src, const char* v_src, int64_t src_stride, int64_t bytes, char* k_dst,
                   char* v_dst, const AttentionBatch& b) {
  const int64_t tokens = static_cast<int64_t>(b.positions->size());
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t slot = SlotOf(b, (*b.seq_of_token)[t], (*b.positions)[t]);
    std::memcpy(k_dst + slot * bytes, k_src + t * src_stride, bytes);
    std::memcpy(v_dst + slot * bytes, v_src + t * src_stride, bytes);
  }
}

// Each token's own slot, where its K and V are written.
std::vector<int64_t> TokenSlots(const AttentionBatch& b) {
  const int64_t tokens = static_cast<int64_t>(b.positions->size());
  std::vector<int64_t> slots(tokens);
  for (int64_t t = 0; t < tokens; ++t) slots[t] = SlotOf(b, (*b.seq_of_token)[t], (*b.positions)[t]);
  return slots;
}

// The end of the run of one sequence's consecutive rows that starts at `begin`.
int64_t RunEnd(const AttentionBatch& b, int64_t begin) {
  const int64_t tokens = static_cast<int64_t>(b.seq_of_token->size());
  int64_t end = begin + 1;
  while (end < tokens && (*b.seq_of_token)[end] == (*b.seq_of_token)[begin]) ++end;
  return end;
}

// Rows of one sequence that a step computes together: [begin, end).
struct RowRun {
  int64_t begin, end;
};

// Where the CPU has no attention kernel (kernels/cpu/attention.h), prompt
// chunks at least this long go through matrix products, in tiles of query
// rows whose f32 score matrix [heads, rows, keys] stays under a budget.
constexpr int64_t kMatmulMinRows = 8;
constexpr int64_t kScoreBudgetBytes = 64ll << 20;

// One run of a sequence's query rows as matrix products: gather its keys and
// values (`index`: the slots of positions [kstart, ctx)), then Q K^T, a causal
// (and windowed) mask, softmax in f32, and P V. Every operator is ATen's, so
// this runs on any device.
void ChunkAttention(const at::Tensor& q, const at::Tensor& k_layer, const at::Tensor& v_layer,
                    at::Tensor& out, const AttentionBatch& b, RowRun run, const at::Tensor& index,
                    int64_t kstart) {
  const int64_t n = run.end - run.begin, heads = q.size(1), d = q.size(2);
  const int64_t kv_heads = k_layer.size(2);
  const int64_t p0 = (*b.positions)[run.begin], ctx = kstart + index.size(0);
  const int64_t rows = k_layer.size(0) * k_layer.size(1);
  // keys, values: [kv_heads, ctx, d] -> [heads, ctx, d]
  at::Tensor keys = k_layer.view({rows, kv_heads, d}).index_select(0, index).permute({1, 0, 2});
  at::Tensor values = v_layer.view({rows, kv_heads, d}).index_select(0, index).permute({1, 0, 2});
  if (b.kv_group == 0 || (b.q_head_offset == 0 && b.kv_group * kv_heads == heads)) {
    const int64_t group = heads / kv_heads;
    if (group > 1) {
      keys = keys.repeat_interleave(group, 0);
      values = values.repeat_interleave(group, 0);
    }
  } else {  // groups cut at the rank's ends: each query head's KV head by index
    std::vector<int64_t> kv_of_head(heads);
    for (int64_t h = 0; h < heads; ++h) kv_of_head[h] = (h + b.q_head_offset) / b.kv_group;
    const at::Tensor select =
        at::from_blob(kv_of_head.data(), {heads}, at::kLong).to(keys.device(), /*non_blocking=*/false);
    keys = keys.index_select(0, select);
    values = values.index_select(0, select);
  }
  at::Tensor queries = q.narrow(0, run.begin, n).permute({1, 0, 2});  // [heads, n, d]
  at::Tensor scores =
      at::matmul(queries, keys.transpose(1, 2)).to(at::kFloat) / std::sqrt(static_cast<double>(d));
  // Query i (position p0 + i) sees keys j with j <= p0 + i and, with a window, j > p0 + i - window.
  const at::TensorOptions longs = at::TensorOptions().dtype(at::kLong).device(q.device());
  at::Tensor qpos = at::arange(p0, p0 + n, longs).unsqueeze(1);
  at::Tensor kpos = at::arange(kstart, ctx, longs).unsqueeze(0);
  at::Tensor hidden = kpos > qpos;
  if (b.sliding_window > 0) hidden = hidden.logical_or(kpos <= qpos - b.sliding_window);
  scores.masked_fill_(hidden, -std::numeric_limits<float>::infinity());
  at::Tensor probs = scores.softmax(-1).to(values.scalar_type());
  out.narrow(0, run.begin, n).copy_(at::matmul(probs, values).permute({1, 0, 2}));
}

// ChunkAttention on the host arrays: the CPU without a vector kernel.
void HostChunkAttention(const at::Tensor& q, const at::Tensor& k_layer, const at::Tensor& v_layer,
                        at::Tensor& out, const AttentionBatch& b, RowRun run) {
  const int64_t seq = (*b.seq_of_token)[run.begin];
  // With a window, keys before the first row's window are never seen.
  const int64_t kstart = FirstKey(b, (*b.positions)[run.begin]), ctx = (*b.positions)[run.end - 1] + 1;
  std::vector<int64_t> slots;
  AppendKeySlots(b, seq, kstart, ctx, slots);
  at::Tensor index = at::from_blob(slots.data(), {ctx - kstart}, at::kLong);
  ChunkAttention(q, k_layer, v_layer, out, b, run, index, kstart);
}

// Decode rows (and short chunks): one task per (row, KV head) computes all
// `group` query heads that share that KV head, so each key and value row is
// read once per group rather than once per query head (GQA). The AVX-512 or
// AVX2 kernel of kernels/cpu/attention.h runs it where the CPU and head size
// allow; this loop is the portable fallback with the same arithmetic.
template <typename T>
void PortableRow(const kernels::DecodeAttentionArgs<T>& a) {
  const int64_t n = a.n, d = a.d, group = a.group;
  float* scores = a.scratch;
  std::vector<float> qf(group * d), acc(group * d, 0.0f),
      max_score(group, -std::numeric_limits<float>::infinity());
  for (int64_t g = 0; g < group; ++g) {
    for (int64_t i = 0; i < d; ++i) qf[g * d + i] = kernels::ToFloat(a.q[g * a.q_head_stride + i]) * a.scale;
  }
  for (int64_t j = 0; j < n; ++j) {
    const T* krow = a.k + a.slots[j] * a.kv_slot_stride;
    for (int64_t g = 0; g < group; ++g) {
      const float* qg = qf.data() + g * d;
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < d; ++i) s += qg[i] * kernels::ToFloat(krow[i]);
      scores[g * n + j] = s;
      max_score[g] = std::max(max_score[g], s);
    }
  }
  for (int64_t g = 0; g < group; ++g) {
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      float& s = scores[g * n + j];
      s = std::exp(s - max_score[g]);
      sum += s;
    }
    const float inv = 1.0f / sum;
    float* ag = acc.data() + g * d;
    for (int64_t j = 0; j < n; ++j) {
      const T* vrow = a.v + a.slots[j] * a.kv_slot_stride;
      const float w = scores[g * n + j];
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) ag[i] += w * kernels::ToFloat(vrow[i]);
    }
    for (int64_t i = 0; i < d; ++i) kernels::PutFloat(a.out + g * a.out_head_stride + i, ag[i] * inv);
  }
}

// The vector kernel for T (float or uint16_t, bf16 bits) and head size d on
// this CPU, or nullptr (kernels/cpu/attention.h).
template <typename T>
void (*FastKernel(int64_t d))(const kernels::DecodeAttentionArgs<T>&) {
  if constexpr (std::is_same_v<T, float>) {
    return kernels::DecodeAttentionF32(kernels::ActiveIsa(), d);
  } else {
    return kernels::DecodeAttentionBf16(kernels::ActiveIsa(), d);
  }
}

// One layer's operands for the host kernels: query head h of token t at
// q + t * q_row + h * d; KV head kvh of slot s at k + (s * kv_heads + kvh) * d
// (v alike); the output [tokens, heads, d] contiguous.
template <typename T>
struct HostOperands {
  const T* q;
  int64_t q_row;
  const T* k;
  const T* v;
  T* out;
  int64_t heads, kv_heads, d;
};

// Key and value rows of its next item a thread asks for ahead (AttentionRows).
constexpr int64_t kFirstRowsAhead = 8;

// Rows `row_list` through the per-(row, KV head) kernel. T: float or
// uint16_t (bf16 bits), as the kernels take them.
template <typename T>
void AttentionRows(const HostOperands<T>& o, const AttentionBatch& b, const std::vector<int64_t>& row_list) {
  const int64_t tokens = static_cast<int64_t>(row_list.size()), heads = o.heads, d = o.d;
  const int64_t kv_heads = o.kv_heads;
  const T* qp = o.q;
  const T* kp = o.k;
  const T* vp = o.v;
  T* op = o.out;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const auto fast = FastKernel<T>(d);
  // Each row's key slots, shared by its KV heads: row r's are
  // slots[offsets[r] .. offsets[r + 1]).
  std::vector<int64_t> slots, offsets(tokens + 1, 0);
  for (int64_t r = 0; r < tokens; ++r) {
    const int64_t t = row_list[r], seq = (*b.seq_of_token)[t], p = (*b.positions)[t];
    AppendKeySlots(b, seq, FirstKey(b, p), p + 1, slots);
    offsets[r + 1] = static_cast<int64_t>(slots.size());
  }
  // Rows of a prompt chunk attend to more keys the later they come, so items
  // are handed out one at a time (dynamic), not in equal contiguous ranges.
  // Small work (short contexts, a tiny model) stays on one thread: a region's
  // barrier can cost more than the work on a busy host (kernels/linear.cc).
  const int64_t items = tokens * kv_heads;
  const int64_t keys = static_cast<int64_t>(slots.size());
  const bool worth_it = keys * heads * d * 2 >= (int64_t{1} << 18);
  const int threads =
      items > 1 && worth_it ? static_cast<int>(std::min<int64_t>(items, kernels::LoopThreads())) : 1;
  // A thread claims its next item before running the current one and asks
  // for that item's first key and value rows, which are cold (a step streams
  // every layer's weights through the caches between two visits to a
  // layer's KV), so their latency overlaps this item's work.
  const int64_t row_bytes = d * static_cast<int64_t>(sizeof(T)), slot_stride = kv_heads * d;
  auto prefetch_first_rows = [&](int64_t item) {
    const int64_t r = item / kv_heads, kvh = item % kv_heads;
    const int64_t first = offsets[r], count = std::min<int64_t>(offsets[r + 1] - first, kFirstRowsAhead);
    for (int64_t j = 0; j < count; ++j) {
      const T* k = kp + slots[first + j] * slot_stride + kvh * d;
      const T* v = vp + slots[first + j] * slot_stride + kvh * d;
      for (int64_t off = 0; off < row_bytes; off += 64) {
        __builtin_prefetch(reinterpret_cast<const char*>(k) + off);
        __builtin_prefetch(reinterpret_cast<const char*>(v) + off);
      }
    }
  };
  std::atomic<int64_t> next{0};
  kernels::RunLoopParts(threads, [&](int) {
    std::vector<float> scratch;
    int64_t item = next.fetch_add(1, std::memory_order_relaxed);
    while (item < items) {
      const int64_t following = next.fetch_add(1, std::memory_order_relaxed);
      if (following < items) prefetch_first_rows(following);
      const int64_t r = item / kv_heads, kvh = item % kv_heads, t = row_list[r];
      const HeadRange hr = QueryHeadsOf(b, kvh, heads, kv_heads);
      const int64_t group = hr.end - hr.first;
      kernels::DecodeAttentionArgs<T> a;
      a.q = qp + t * o.q_row + hr.first * d;
      a.q_head_stride = d;
      a.k = kp + kvh * d;
      a.v = vp + kvh * d;
      a.kv_slot_stride = slot_stride;
      a.slots = slots.data() + offsets[r];
      a.n = offsets[r + 1] - offsets[r];
      a.out = op + (t * heads + hr.first) * d;
      a.out_head_stride = d;
      a.group = group;
      a.d = d;
      a.scale = scale;
      scratch.resize(group * a.n);
      a.scratch = scratch.data();
      if (fast != nullptr) {
        fast(a);
      } else {
        PortableRow(a);
      }
      item = following;
    }
  });
}

// AttentionRows on tensors: q dtype[tokens, heads, d] with heads contiguous
// (rows may be strided), the pool layers dtype[blocks, block_size, kv_heads, d].
template <typename T>
void AttentionKernel(const at::Tensor& q, const at::Tensor& k_layer, const at::Tensor& v_layer,
                     at::Tensor& out, const AttentionBatch& b, const std::vector<int64_t>& row_list) {
  HostOperands<T> o;
  o.q = static_cast<const T*>(q.data_ptr());
  o.q_row = q.stride(0);
  o.k = static_cast<const T*>(k_layer.data_ptr());
  o.v = static_cast<const T*>(v_layer.data_ptr());
  o.out = static_cast<T*>(out.data_ptr());
  o.heads = q.size(1);
  o.kv_heads = k_layer.size(2);
  o.d = q.size(2);
  AttentionRows(o, b, row_list);
}

}  // namespace

HeadRange QueryHeadsOf(const AttentionBatch& b, int64_t kv_head, int64_t heads, int64_t kv_heads) {
  if (b.kv_group == 0) {
    const int64_t group = heads / kv_heads;
    return {kv_head * group, (kv_head + 1) * group};
  }
  return {std::max<int64_t>(0, kv_head * b.kv_group - b.q_head_offset),
          std::min<int64_t>(heads, (kv_head + 1) * b.kv_group - b.q_head_offset)};
}

void PrepareDeviceBatch(AttentionBatch& b, std::vector<int64_t>& slots, std::vector<int64_t>& key_slots,
                        bool with_keys) {
  const int64_t tokens = static_cast<int64_t>(b.positions->size());
  slots = TokenSlots(b);
  if (!with_keys) return;
  b.runs.clear();
  key_slots.clear();
  for (int64_t begin = 0; begin < tokens;) {
    const int64_t end = RunEnd(b, begin);
    KeyRun r;
    r.begin = begin;
    r.end = end;
    r.kstart = FirstKey(b, (*b.positions)[begin]);
    r.ctx = (*b.positions)[end - 1] + 1;
    r.key_offset = static_cast<int64_t>(key_slots.size());
    AppendKeySlots(b, (*b.seq_of_token)[begin], r.kstart, r.ctx, key_slots);
    b.runs.push_back(r);
    begin = end;
  }
}

void WriteKv(const at::Tensor& k, const at::Tensor& v, at::Tensor& k_layer, at::Tensor& v_layer,
             const AttentionBatch& b) {
  const int64_t tokens = k.size(0);
  const int64_t row_elems = k_layer.size(2) * k_layer.size(3);
  if (kernels::UseAtenOps(k_layer)) {
    const int64_t rows = k_layer.size(0) * k_layer.size(1);
    k_layer.view({rows, k_layer.size(2), k_layer.size(3)})
        .index_copy_(0, b.slots, k.to(k_layer.scalar_type()));
    v_layer.view({rows, v_layer.size(2), v_layer.size(3)})
        .index_copy_(0, b.slots, v.to(v_layer.scalar_type()));
    return;
  }
  const bool direct = k.scalar_type() == k_layer.scalar_type() && v.scalar_type() == v_layer.scalar_type() &&
                      k.stride(2) == 1 && v.stride(2) == 1 && k.stride(1) == k.size(2) &&
                      v.stride(1) == v.size(2) && k.size(1) * k.size(2) == row_elems &&
                      k.stride(0) == v.stride(0);
  if (direct) {
    // One memcpy per token and tensor: k[t] and v[t] are rows of the qkv projection.
    CopyKvToSlots(static_cast<const char*>(k.data_ptr()), static_cast<const char*>(v.data_ptr()),
                  k.stride(0) * k.element_size(), row_elems * k.element_size(),
                  static_cast<char*>(k_layer.data_ptr()), static_cast<char*>(v_layer.data_ptr()), b);
    return;
  }
  std::vector<int64_t> slots = TokenSlots(b);
  at::Tensor index = at::from_blob(slots.data(), {tokens}, at::kLong);
  const int64_t rows = k_layer.size(0) * k_layer.size(1);
  auto k_flat = k_layer.view({rows, k_layer.size(2), k_layer.size(3)});
  auto v_flat = v_layer.view({rows, v_layer.size(2), v_layer.size(3)});
  k_flat.index_copy_(0, index, k.to(k_layer.scalar_type()));
  v_flat.index_copy_(0, index, v.to(v_layer.scalar_type()));
}

at::Tensor PagedAttention(const at::Tensor& q, const at::Tensor& k_layer, const at::Tensor& v_layer,
                          const AttentionBatch& batch) {
  // q may be a view into the qkv projection: rows strided, heads contiguous.
  at::Tensor qc = (q.stride(2) == 1 && q.stride(1) == q.size(2)) ? q : q.contiguous();
  at::Tensor out = at::empty(qc.sizes(), qc.options());
  const int64_t tokens = qc.size(0);
  if (kernels::UseAtenOps(k_layer)) {
    // A device: its own kernel where there is one, else matrix products per
    // run, in tiles whose score matrix stays under the budget.
    if (CudaPagedAttention(qc, k_layer, v_layer, out, batch)) return out;
    TORCH_CHECK(tokens == 0 || !batch.runs.empty(),
                "paged attention: no device kernel took the step and its key slots were not prepared");
    for (const KeyRun& r : batch.runs) {
      const int64_t tile = std::max<int64_t>(1, kScoreBudgetBytes / (4 * qc.size(1) * (r.ctx - r.kstart)));
      for (int64_t t = r.begin; t < r.end; t += tile) {
        const RowRun run{t, std::min(r.end, t + tile)};
        // A tile's keys end at its last row; they start where the run's do.
        const int64_t ctx = (*batch.positions)[run.end - 1] + 1;
        ChunkAttention(qc, k_layer, v_layer, out, batch, run,
                       batch.key_slots.narrow(0, r.key_offset, ctx - r.kstart), r.kstart);
      }
    }
    return out;
  }
  // Without a vector kernel, long runs of one sequence's rows (prompt chunks)
  // use matrix products and the rest (decodes, short chunks) the per-row loop.
  const bool fast = qc.scalar_type() == at::kFloat ? FastKernel<float>(qc.size(2)) != nullptr
                                                   : FastKernel<uint16_t>(qc.size(2)) != nullptr;
  // With a vector kernel every row goes through it, prompt chunks too: the
  // AVX-512 one beat the matrix products at 128 and at 1024 prompt tokens
  // (docs/cpu_kernels.md); the AVX2 one has not been measured against them.
  const int64_t matmul_min_rows = fast ? std::numeric_limits<int64_t>::max() : kMatmulMinRows;
  std::vector<int64_t> kernel_rows;
  for (int64_t begin = 0; begin < tokens;) {
    const int64_t end = RunEnd(batch, begin);
    if (end - begin >= matmul_min_rows) {
      const int64_t keys = (*batch.positions)[end - 1] + 1;
      const int64_t tile = std::max<int64_t>(1, kScoreBudgetBytes / (4 * qc.size(1) * keys));
      for (int64_t t = begin; t < end; t += tile) {
        HostChunkAttention(qc, k_layer, v_layer, out, batch, RowRun{t, std::min(end, t + tile)});
      }
    } else {
      for (int64_t r = begin; r < end; ++r) kernel_rows.push_back(r);
    }
    begin = end;
  }
  if (kernel_rows.empty()) return out;
  if (qc.scalar_type() == at::kFloat) {
    AttentionKernel<float>(qc, k_layer, v_layer, out, batch, kernel_rows);
  } else {
    TORCH_CHECK(qc.scalar_type() == at::kBFloat16, "attention supports f32 and bf16");
    AttentionKernel<uint16_t>(qc, k_layer, v_layer, out, batch, kernel_rows);
  }
  return out;
}

at::Tensor AttendLayer(const at::Tensor& qkv, int64_t heads, int64_t kv_heads, int64_t head_dim,
                       at::Tensor& k_pool, at::Tensor& v_pool, int64_t layer, const AttentionBatch& batch,
                       bool kv_written) {
  if (k_pool.scalar_type() != qkv.scalar_type() && !kv_written) {
    // A KV cache in another dtype (--kv-dtype): attention runs in the pool's
    // dtype, q, k and v rounded to it, and the output goes back.
    return AttendLayer(qkv.to(k_pool.scalar_type()), heads, kv_heads, head_dim, k_pool, v_pool, layer, batch)
        .to(qkv.scalar_type());
  }
  const int64_t tokens = qkv.size(0), d = head_dim;
  const bool f32 = qkv.scalar_type() == at::kFloat;
  const bool vector_kernel = f32 ? FastKernel<float>(d) != nullptr
                                 : qkv.scalar_type() == at::kBFloat16 && FastKernel<uint16_t>(d) != nullptr;
  const bool direct = vector_kernel && !kv_written && !kernels::UseAtenOps(qkv) && qkv.dim() == 2 &&
                      qkv.stride(1) == 1 && k_pool.scalar_type() == qkv.scalar_type() &&
                      v_pool.scalar_type() == qkv.scalar_type() && k_pool.is_contiguous() &&
                      v_pool.is_contiguous() && k_pool.size(3) == kv_heads && k_pool.size(4) == d;
  if (!direct) {
    // Views of the projection and of the pool's layer, for WriteKv and
    // PagedAttention (a device, or a CPU without the vector kernel).
    at::Tensor q = qkv.narrow(1, 0, heads * d).view({tokens, heads, d});
    at::Tensor k = qkv.narrow(1, heads * d, kv_heads * d).view({tokens, kv_heads, d});
    at::Tensor v = qkv.narrow(1, (heads + kv_heads) * d, kv_heads * d).view({tokens, kv_heads, d});
    at::Tensor k_layer = k_pool.select(0, layer), v_layer = v_pool.select(0, layer);
    if (!kv_written) WriteKv(k, v, k_layer, v_layer, batch);
    return PagedAttention(q, k_layer, v_layer, batch).view({tokens, heads * d});
  }
  at::Tensor out = at::empty({tokens, heads * d}, qkv.options());
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* rows = static_cast<const T*>(qkv.data_ptr());
    const int64_t slot_elems = kv_heads * d;
    T* k_layer = static_cast<T*>(k_pool.data_ptr()) + layer * k_pool.stride(0);
    T* v_layer = static_cast<T*>(v_pool.data_ptr()) + layer * v_pool.stride(0);
    // Each token's K and V heads, adjacent in its qkv row, to its slot.
    CopyKvToSlots(reinterpret_cast<const char*>(rows + heads * d),
                  reinterpret_cast<const char*>(rows + (heads + kv_heads) * d), qkv.stride(0) * sizeof(T),
                  slot_elems * sizeof(T), reinterpret_cast<char*>(k_layer), reinterpret_cast<char*>(v_layer),
                  batch);
    HostOperands<T> o;
    o.q = rows;
    o.q_row = qkv.stride(0);
    o.k = k_layer;
    o.v = v_layer;
    o.out = static_cast<T*>(out.data_ptr());
    o.heads = heads;
    o.kv_heads = kv_heads;
    o.d = d;
    std::vector<int64_t> all(tokens);
    for (int64_t t = 0; t < tokens; ++t) all[t] = t;
    AttentionRows(o, batch, all);
  };
  if (f32) {
    run(float{});
  } else {
    run(uint16_t{});
  }
  return out;
}

}  // namespace shardlm
