#include "model/paged_attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace shardlm {
namespace {

int64_t SlotOf(const AttentionBatch& b, int64_t seq, int64_t pos) {
  const int32_t block = b.block_tables[seq * b.max_blocks + pos / b.block_size];
  return static_cast<int64_t>(block) * b.block_size + pos % b.block_size;
}

template <typename T>
void AttentionKernel(const at::Tensor& q, const at::Tensor& k_layer, const at::Tensor& v_layer,
                     at::Tensor& out, const AttentionBatch& b) {
  const int64_t tokens = q.size(0), heads = q.size(1), d = q.size(2);
  const int64_t kv_heads = k_layer.size(2);
  const int64_t group = heads / kv_heads;
  const T* qp = q.data_ptr<T>();
  const T* kp = k_layer.data_ptr<T>();
  const T* vp = v_layer.data_ptr<T>();
  T* op = out.data_ptr<T>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  at::parallel_for(0, tokens * heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores, qf(d), acc(d);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / heads, h = item % heads, kvh = h / group;
      const int64_t seq = (*b.seq_of_token)[t], p = (*b.positions)[t];
      const int64_t first = b.sliding_window > 0 ? std::max<int64_t>(0, p - b.sliding_window + 1) : 0;
      const T* qrow = qp + (t * heads + h) * d;
      for (int64_t i = 0; i < d; ++i) qf[i] = static_cast<float>(qrow[i]) * scale;
      scores.resize(p - first + 1);
      float max_score = -std::numeric_limits<float>::infinity();
      for (int64_t j = first; j <= p; ++j) {
        const T* krow = kp + (SlotOf(b, seq, j) * kv_heads + kvh) * d;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < d; ++i) s += qf[i] * static_cast<float>(krow[i]);
        scores[j - first] = s;
        max_score = std::max(max_score, s);
      }
      float denom = 0.0f;
      for (float& s : scores) {
        s = std::exp(s - max_score);
        denom += s;
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = first; j <= p; ++j) {
        const T* vrow = vp + (SlotOf(b, seq, j) * kv_heads + kvh) * d;
        const float w = scores[j - first];
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) acc[i] += w * static_cast<float>(vrow[i]);
      }
      T* orow = op + (t * heads + h) * d;
      const float inv = 1.0f / denom;
      for (int64_t i = 0; i < d; ++i) orow[i] = static_cast<T>(acc[i] * inv);
    }
  });
}

}  // namespace

void WriteKv(const at::Tensor& k, const at::Tensor& v, at::Tensor& k_layer, at::Tensor& v_layer,
             const AttentionBatch& b) {
  const int64_t tokens = k.size(0);
  std::vector<int64_t> slots(tokens);
  for (int64_t t = 0; t < tokens; ++t) {
    slots[t] = SlotOf(b, (*b.seq_of_token)[t], (*b.positions)[t]);
  }
  at::Tensor index = at::from_blob(slots.data(), {tokens}, at::kLong);
  const int64_t rows = k_layer.size(0) * k_layer.size(1);
  auto k_flat = k_layer.view({rows, k_layer.size(2), k_layer.size(3)});
  auto v_flat = v_layer.view({rows, v_layer.size(2), v_layer.size(3)});
  k_flat.index_copy_(0, index, k.to(k_layer.scalar_type()));
  v_flat.index_copy_(0, index, v.to(v_layer.scalar_type()));
}

at::Tensor PagedAttention(const at::Tensor& q, const at::Tensor& k_layer, const at::Tensor& v_layer,
                          const AttentionBatch& batch) {
  at::Tensor qc = q.contiguous();
  at::Tensor out = at::empty_like(qc);
  if (qc.scalar_type() == at::kFloat) {
    AttentionKernel<float>(qc, k_layer, v_layer, out, batch);
  } else {
    TORCH_CHECK(qc.scalar_type() == at::kBFloat16, "attention supports f32 and bf16");
    AttentionKernel<c10::BFloat16>(qc, k_layer, v_layer, out, batch);
  }
  return out;
}

}  // namespace shardlm
