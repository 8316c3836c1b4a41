#include "model/llama_model.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/uneven.h"
#include "common/status.h"
#include "kernels/attention.h"
#include "kernels/cuda_attention.h"
#include "kernels/cuda_fused.h"
#include "kernels/fused.h"
#include "kernels/linear.h"
#include "kernels/step_profile.h"
#include "model/step_upload.h"
#include "partitioning/shard_loader.h"

namespace shardlm {

std::vector<float> RotaryInverseFrequencies(const ModelConfig& cfg, double theta) {
  const int64_t half = cfg.head_dim / 2;
  const double base = theta > 0 ? theta : cfg.rope_theta;
  std::vector<float> inv(half);
  for (int64_t i = 0; i < half; ++i) {
    inv[i] = static_cast<float>(1.0 / std::pow(base, static_cast<double>(2 * i) / cfg.head_dim));
  }
  if (cfg.rope_scaling) {
    // Llama 3.1: long wavelengths are divided by `factor`, short ones kept,
    // and the band between is interpolated smoothly.
    const Llama3RopeScaling& s = *cfg.rope_scaling;
    const double low_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
    const double high_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
    for (float& f : inv) {
      const double wavelen = 2.0 * M_PI / f;
      if (wavelen < high_wavelen) continue;
      if (wavelen > low_wavelen) {
        f = static_cast<float>(f / s.factor);
        continue;
      }
      const double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      f = static_cast<float>((1.0 - smooth) * f / s.factor + smooth * f);
    }
  }
  return inv;
}

namespace {

// Runs fn() as one timed part of the step (kernels/step_profile.h).
template <typename Fn>
auto Timed(kernels::StepPart part, Fn&& fn) {
  kernels::StepPartTimer timer(part);
  return fn();
}

}  // namespace

// This rank's embedding rows `index`, dtype[index.size(0), hidden]: from the
// table, its blocks, or the tied LM head.
at::Tensor LlamaModel::EmbeddingRows(const at::Tensor& index) const {
  if (embed_.defined()) return embed_.index_select(0, index);
  return (embed_blocks_.defined() ? embed_blocks_.Rows(index) : lm_head_.Rows(index)).to(dtype_);
}

absl::StatusOr<at::Tensor> LlamaModel::Embed(const at::Tensor& ids) {
  // Vocab-parallel: this rank owns rows [start, start + vocab.tp).
  const int64_t per_rank = plan_.vocab_per_rank();
  const int64_t start = plan_.vocab_start();
  at::Tensor rows;
  if (!kernels::UseAtenOps(ids)) {
    // On the host, one pass over the ids instead of six operators (a
    // batch-8 step's embedding took 0.1 ms in them).
    const int64_t T = ids.size(0);
    const int64_t* ip = ids.data_ptr<int64_t>();
    std::vector<int64_t> local(T);
    for (int64_t t = 0; t < T; ++t) local[t] = std::clamp<int64_t>(ip[t] - start, 0, per_rank - 1);
    at::Tensor index = at::from_blob(local.data(), {T}, at::kLong);
    rows = EmbeddingRows(index).contiguous();
    const int64_t row_bytes = rows.size(1) * rows.element_size();
    for (int64_t t = 0; t < T; ++t) {
      // Another rank's token: zeros here, its row from the reduction.
      if (ip[t] - start != local[t])
        std::memset(static_cast<char*>(rows.data_ptr()) + t * row_bytes, 0, row_bytes);
    }
  } else {
    at::Tensor local = ids - start;
    at::Tensor mine = (local >= 0).logical_and(local < per_rank);
    rows = EmbeddingRows(local.clamp(0, per_rank - 1));
    if (plan_.rank().world_size > 1) rows = rows * mine.unsqueeze(1).to(dtype_);
  }
  // rows: dtype[tokens, hidden] {tp unreduced}
  SHARDLM_ASSIGN_OR_RETURN(at::Tensor x, ReduceScatterParts(*comm_, rows, 1, plan_.hidden_parts()));
  // Gemma 3: scaled by sqrt(hidden), the scale rounded to the dtype as transformers does.
  if (cfg_.embedding_scale != 0.0) {
    const float scale = dtype_ == at::kBFloat16 ? static_cast<float>(c10::BFloat16(cfg_.embedding_scale))
                                                : static_cast<float>(cfg_.embedding_scale);
    x = x * scale;
  }
  return x;
}

void LlamaModel::RotaryTables(const std::vector<int32_t>& positions, std::vector<float>& cos,
                              std::vector<float>& sin, bool local) const {
  const int64_t T = static_cast<int64_t>(positions.size()), half = cfg_.head_dim / 2;
  cos.resize(T * half);
  sin.resize(T * half);
  const float* inv = (local ? inv_freq_local_ : inv_freq_).data_ptr<float>();
  const bool bf16 = dtype_ == at::kBFloat16;
  for (int64_t t = 0; t < T; ++t) {
    const float pos = static_cast<float>(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = pos * inv[i];
      float c = std::cos(angle), sn = std::sin(angle);
      if (bf16) {
        c = static_cast<float>(c10::BFloat16(c));
        sn = static_cast<float>(c10::BFloat16(sn));
      }
      cos[t * half + i] = c;
      sin[t * half + i] = sn;
    }
  }
}

absl::StatusOr<at::Tensor> LlamaModel::Forward(const StepInput& step, KvPool& pool) {
  const int64_t T = static_cast<int64_t>(step.token_ids.size());
  if (T == 0) return absl::InvalidArgumentError("empty step");
  const int64_t half = cfg_.head_dim / 2;

  // Block tables as one int32[seqs, max_blocks] array.
  int64_t max_blocks = 1;
  for (const auto& t : step.block_tables) max_blocks = std::max<int64_t>(max_blocks, t.size());
  std::vector<int32_t> tables(step.block_tables.size() * max_blocks, 0);
  for (size_t s = 0; s < step.block_tables.size(); ++s) {
    std::copy(step.block_tables[s].begin(), step.block_tables[s].end(), tables.begin() + s * max_blocks);
  }
  AttentionBatch batch;
  batch.positions = &step.positions;
  batch.seq_of_token = &step.seq_of_token;
  batch.block_tables = tables.data();
  batch.max_blocks = max_blocks;
  batch.block_size = pool.shape().block_size;
  SetAttentionLayout(batch);
  std::vector<int64_t> rows;
  for (const SampleRow& r : step.rows) rows.push_back(r.row);

  std::vector<int64_t> ids64(step.token_ids.begin(), step.token_ids.end());
  // cos, sin: f32[tokens, head_dim / 2]
  std::vector<float> cos_host, sin_host, cos_local, sin_local;
  RotaryTables(step.positions, cos_host, sin_host);
  if (inv_freq_local_.defined()) RotaryTables(step.positions, cos_local, sin_local, /*local=*/true);
  StepTensors in;
  StepUpload up;
  SHARDLM_RETURN_IF_ERROR(CatchTorchErrors("staging the step", [&]() -> absl::Status {
    if (kernels::UseAtenOps(pool.k())) {
      // Off the CPU: every array the step reads goes over in one copy.
      std::vector<int64_t> slots, key_slots;
      // The CUDA kernel reads the block tables itself; the ATen fallback
      // needs every run's key slots.
      PrepareDeviceBatch(batch, slots, key_slots,
                         /*with_keys=*/!CudaPagedAttentionTakes(pool.k(), cfg_.head_dim));
      const int i_ids = up.Add(ids64), i_cos = up.Add(cos_host), i_sin = up.Add(sin_host);
      const int i_rows = up.Add(rows), i_slots = up.Add(slots), i_keys = up.Add(key_slots);
      const int i_pos = up.Add(step.positions), i_seq = up.Add(step.seq_of_token), i_tables = up.Add(tables);
      up.Upload(pool.k().device());
      in.ids = up.Get(i_ids);
      in.cos = up.Get(i_cos).view({T, half});
      in.sin = up.Get(i_sin).view({T, half});
      in.row_index = up.Get(i_rows);
      batch.slots = up.Get(i_slots);
      batch.key_slots = up.Get(i_keys);
      batch.positions_dev = up.Get(i_pos);
      batch.seq_of_token_dev = up.Get(i_seq);
      batch.block_tables_dev = up.Get(i_tables);
    } else {
      in.ids = at::from_blob(ids64.data(), {T}, at::kLong);
      in.cos = at::from_blob(cos_host.data(), {T, half}, at::kFloat);
      in.sin = at::from_blob(sin_host.data(), {T, half}, at::kFloat);
      if (!cos_local.empty()) {
        in.cos_local = at::from_blob(cos_local.data(), {T, half}, at::kFloat);
        in.sin_local = at::from_blob(sin_local.data(), {T, half}, at::kFloat);
      }
      in.row_index = at::from_blob(rows.data(), {static_cast<int64_t>(rows.size())}, at::kLong);
    }
    return absl::OkStatus();
  }));
  return ForwardTensors(in, batch, pool);
}

void LlamaModel::SetAttentionLayout(AttentionBatch& batch) const {
  batch.sliding_window = cfg_.sliding_window.value_or(0);
  batch.kv_group = plan_.kv_group();
  batch.q_head_offset = plan_.q_head_offset();
}

// x += the projection of `in` by w (RMS-normed by `out_norm` first, when
// given: Gemma 3): with one rank nothing is reduced between a projection and
// its residual add, so the product adds into x itself; otherwise the partial
// products are reduce-scattered over the hidden parts (and, to be normed,
// gathered whole again).
absl::Status LlamaModel::AddProjected(at::Tensor& x, const at::Tensor& in, const kernels::LinearWeight& w,
                                      const at::Tensor& out_norm) {
  const bool one_rank = comm_->rank_info().world_size == 1;
  if (one_rank && !out_norm.defined()) {
    kernels::LinearAddTo(x, in, w);
    return absl::OkStatus();
  }
  at::Tensor y = kernels::Linear(in, w);  // dtype[tokens, hidden] {tp unreduced}
  if (!one_rank) {
    SHARDLM_ASSIGN_OR_RETURN(y, Timed(kernels::StepPart::kCollectives, [&] {
                               return ReduceScatterParts(*comm_, y, 1, plan_.hidden_parts());
                             }));
  }
  if (out_norm.defined()) {
    SHARDLM_ASSIGN_OR_RETURN(at::Tensor normed, GatherNormed(y, out_norm));
    int64_t start = 0;
    for (int r = 0; r < comm_->rank_info().rank; ++r) start += plan_.hidden_parts()[r];
    y = normed.narrow(1, start, plan_.hidden_per_rank()).contiguous();
  }
  Timed(kernels::StepPart::kElementwise, [&] { kernels::AddInPlace(x, y); });
  return absl::OkStatus();
}

// x's rows gathered over the hidden parts and RMS-normed: dtype[rows, hidden].
absl::StatusOr<at::Tensor> LlamaModel::GatherNormed(const at::Tensor& x, const at::Tensor& weight) {
  SHARDLM_ASSIGN_OR_RETURN(at::Tensor h, Timed(kernels::StepPart::kCollectives, [&] {
                             return AllGatherParts(*comm_, x, 1, plan_.hidden_parts());
                           }));
  return Timed(kernels::StepPart::kElementwise,
               [&] { return kernels::RmsNorm(h, weight, cfg_.rms_norm_eps); });
}

// Layer li's attention block: x += o(attention(rotary(qkv(norm(x))))), its K
// and V written to the pool.
absl::Status LlamaModel::AttentionBlock(size_t li, at::Tensor& x, const StepTensors& in,
                                        const AttentionBatch& batch, KvPool& pool) {
  const Layer& L = layers_[li];
  const int64_t d = cfg_.head_dim;
  const int64_t hq = plan_.num_heads_per_rank(), hkv = plan_.num_kv_heads_per_rank();
  // This layer's window (Gemma 3 interleaves full layers) and RoPE tables.
  const bool windowed = LayerIsWindowed(cfg_, static_cast<int64_t>(li));
  const AttentionBatch* layer_batch = &batch;
  AttentionBatch full;  // a full layer's copy, where the step's batch carries a window
  if (!windowed && batch.sliding_window != 0) {
    full = batch;
    full.sliding_window = 0;
    layer_batch = &full;
  }
  const bool local = windowed && in.cos_local.defined();
  SHARDLM_ASSIGN_OR_RETURN(at::Tensor h, GatherNormed(x, L.input_norm));
  // qkv: dtype[tokens, (heads.tp + 2 kv_heads.tp) * head_dim]; q and k are
  // normed (Qwen3) and rotated in place, then attended from where they are.
  at::Tensor qkv = kernels::Linear(h, L.qkv, L.qkv_bias);
  bool kv_written = false;
  {
    kernels::StepPartTimer timer(kernels::StepPart::kElementwise);
    if (L.q_norm.defined()) {
      kernels::RmsNormHeadsInPlace(qkv, 0, hq, d, L.q_norm, cfg_.rms_norm_eps);
      kernels::RmsNormHeadsInPlace(qkv, hq, hkv, d, L.k_norm, cfg_.rms_norm_eps);
    }
    // On a GPU one kernel rotates q and k and writes k and v to their slots.
    if (qkv.is_cuda()) {
      at::Tensor k_layer = pool.k().select(0, static_cast<int64_t>(li));
      at::Tensor v_layer = pool.v().select(0, static_cast<int64_t>(li));
      kv_written =
          kernels::CudaRotaryKvInPlace(qkv, hq, hkv, d, in.cos, in.sin, batch.slots, k_layer, v_layer);
    }
    if (!kv_written)
      kernels::RotaryInPlace(qkv, hq + hkv, d, local ? in.cos_local : in.cos, local ? in.sin_local : in.sin);
  }
  at::Tensor attn = Timed(kernels::StepPart::kAttention, [&] {
    return AttendLayer(qkv, hq, hkv, d, pool.k(), pool.v(), static_cast<int64_t>(li), *layer_batch,
                       kv_written);
  });
  return AddProjected(x, attn, L.o, L.attn_out_norm);
}

// Layer li's MLP block: x += down(silu(gate(norm(x))) * up(norm(x))); for
// Gemma 3 gelu_tanh in place of silu and the output RMS-normed first.
absl::Status LlamaModel::MlpBlock(size_t li, at::Tensor& x) {
  const Layer& L = layers_[li];
  SHARDLM_ASSIGN_OR_RETURN(at::Tensor h, GatherNormed(x, L.post_norm));
  at::Tensor act;  // dtype[tokens, intermediate.tp]
  if (cfg_.hidden_act == Activation::kGeluTanh) {
    const at::Tensor gate_up = kernels::Linear(h, L.gate_up);
    const int64_t inter = gate_up.size(1) / 2;
    kernels::StepPartTimer timer(kernels::StepPart::kElementwise);
    act = at::gelu(gate_up.narrow(1, 0, inter), "tanh") * gate_up.narrow(1, inter, inter);
  } else {
    act = kernels::LinearSwiGlu(h, L.gate_up);
  }
  return AddProjected(x, act, L.down, L.mlp_out_norm);
}

// The LM head over the rows that need a distribution only; rank 0 (which
// samples) receives the full vocabulary: f32[rows, vocab].
absl::StatusOr<at::Tensor> LlamaModel::Head(const at::Tensor& x, const StepTensors& in) {
  if (in.row_index.numel() == 0) {
    return at::empty({0, cfg_.vocab_size}, at::TensorOptions().dtype(at::kFloat).device(device_));
  }
  SHARDLM_ASSIGN_OR_RETURN(at::Tensor h, GatherNormed(x.index_select(0, in.row_index), final_norm_));
  at::Tensor local = kernels::ToFloat32(kernels::Linear(h, lm_head_));  // f32[rows, vocab.tp]
  return Timed(kernels::StepPart::kCollectives,
               [&] { return GatherParts(*comm_, local, 1, /*root=*/0, plan_.vocab_parts()); });
}

absl::StatusOr<at::Tensor> LlamaModel::ForwardTensors(const StepTensors& in, const AttentionBatch& batch,
                                                      KvPool& pool) {
  at::Tensor logits;
  absl::Status st = CatchTorchErrors("forward", [&]() -> absl::Status {
    at::Tensor x;
    {
      kernels::StepPartTimer timer(kernels::StepPart::kElementwise);
      SHARDLM_ASSIGN_OR_RETURN(x, Embed(in.ids));  // dtype[tokens, hidden.tp]
      x = x.contiguous();
    }
    for (size_t li = 0; li < layers_.size(); ++li) {
      SHARDLM_RETURN_IF_ERROR(AttentionBlock(li, x, in, batch, pool));
      SHARDLM_RETURN_IF_ERROR(MlpBlock(li, x));
    }
    SHARDLM_ASSIGN_OR_RETURN(logits, Head(x, in));
    return absl::OkStatus();
  });
  SHARDLM_RETURN_IF_ERROR(st);
  return logits;
}

}  // namespace shardlm
