#include "model/llama_model.h"

#include <ATen/ATen.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/paged_attention.h"
#include "partitioning/shard_loader.h"

namespace shardlm {

std::vector<float> RotaryInverseFrequencies(const ModelConfig& cfg) {
  const int64_t half = cfg.head_dim / 2;
  std::vector<float> inv(half);
  for (int64_t i = 0; i < half; ++i) {
    inv[i] = static_cast<float>(1.0 / std::pow(cfg.rope_theta, static_cast<double>(2 * i) / cfg.head_dim));
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

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Load(const ModelConfig& cfg, const Checkpoint& ckpt,
                                                             const ShardPlan& plan, at::ScalarType dtype,
                                                             Communicator* comm) {
  std::unique_ptr<LlamaModel> m(new LlamaModel(cfg, plan, dtype, comm));
  const int64_t H = cfg.hidden_size, I = cfg.intermediate_size, d = cfg.head_dim;
  const int64_t V = cfg.vocab_size, q_out = cfg.num_heads * d, kv_out = cfg.num_kv_heads * d;
  auto load = [&](const std::string& name, std::vector<int64_t> shape) {
    return LoadShard(ckpt, plan, name, shape, dtype);
  };
  SHARDLM_ASSIGN_OR_RETURN(m->embed_, load("model.embed_tokens.weight", {V, H}));
  SHARDLM_ASSIGN_OR_RETURN(m->final_norm_, load("model.norm.weight", {H}));
  if (cfg.tie_word_embeddings && !ckpt.Has("lm_head.weight")) {
    m->lm_head_ = m->embed_;
  } else {
    SHARDLM_ASSIGN_OR_RETURN(m->lm_head_, load("lm_head.weight", {V, H}));
  }
  absl::Status st = CatchTorchErrors("loading layers", [&]() -> absl::Status {
    for (int64_t i = 0; i < cfg.num_layers; ++i) {
      const std::string p = absl::StrCat("model.layers.", i, ".");
      Layer L;
      SHARDLM_ASSIGN_OR_RETURN(L.input_norm, load(p + "input_layernorm.weight", {H}));
      SHARDLM_ASSIGN_OR_RETURN(L.post_norm, load(p + "post_attention_layernorm.weight", {H}));
      SHARDLM_ASSIGN_OR_RETURN(at::Tensor q, load(p + "self_attn.q_proj.weight", {q_out, H}));
      SHARDLM_ASSIGN_OR_RETURN(at::Tensor k, load(p + "self_attn.k_proj.weight", {kv_out, H}));
      SHARDLM_ASSIGN_OR_RETURN(at::Tensor v, load(p + "self_attn.v_proj.weight", {kv_out, H}));
      L.qkv = at::cat({q, k, v}, 0);  // one matmul instead of three
      if (cfg.attention_bias) {
        SHARDLM_ASSIGN_OR_RETURN(at::Tensor qb, load(p + "self_attn.q_proj.bias", {q_out}));
        SHARDLM_ASSIGN_OR_RETURN(at::Tensor kb, load(p + "self_attn.k_proj.bias", {kv_out}));
        SHARDLM_ASSIGN_OR_RETURN(at::Tensor vb, load(p + "self_attn.v_proj.bias", {kv_out}));
        L.qkv_bias = at::cat({qb, kb, vb}, 0);
      }
      if (cfg.qk_norm) {
        SHARDLM_ASSIGN_OR_RETURN(L.q_norm, load(p + "self_attn.q_norm.weight", {d}));
        SHARDLM_ASSIGN_OR_RETURN(L.k_norm, load(p + "self_attn.k_norm.weight", {d}));
      }
      SHARDLM_ASSIGN_OR_RETURN(L.o, load(p + "self_attn.o_proj.weight", {H, q_out}));
      SHARDLM_ASSIGN_OR_RETURN(at::Tensor gate, load(p + "mlp.gate_proj.weight", {I, H}));
      SHARDLM_ASSIGN_OR_RETURN(at::Tensor up, load(p + "mlp.up_proj.weight", {I, H}));
      L.gate_up = at::cat({gate, up}, 0);
      SHARDLM_ASSIGN_OR_RETURN(L.down, load(p + "mlp.down_proj.weight", {H, I}));
      m->layers_.push_back(std::move(L));
    }
    std::vector<float> inv = RotaryInverseFrequencies(cfg);
    m->inv_freq_ = at::tensor(inv, at::kFloat);
    return absl::OkStatus();
  });
  SHARDLM_RETURN_IF_ERROR(st);
  int64_t bytes = m->embed_.nbytes() + m->final_norm_.nbytes();
  if (!m->lm_head_.is_same(m->embed_)) bytes += m->lm_head_.nbytes();
  for (const Layer& L : m->layers_) {
    for (const at::Tensor* t : {&L.input_norm, &L.qkv, &L.qkv_bias, &L.q_norm, &L.k_norm, &L.o, &L.post_norm,
                                &L.gate_up, &L.down}) {
      if (t->defined()) bytes += t->nbytes();
    }
  }
  m->weight_bytes_ = bytes;
  return m;
}

at::Tensor LlamaModel::RmsNorm(const at::Tensor& x, const at::Tensor& weight) const {
  // As in HF: normalise in f32, cast back, then scale.
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + cfg_.rms_norm_eps);
  return normed.to(dtype_) * weight;
}

at::Tensor LlamaModel::Rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) const {
  // Rotate-half convention: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin).
  const int64_t half = x.size(-1) / 2;
  at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return at::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
}

absl::StatusOr<at::Tensor> LlamaModel::Embed(const at::Tensor& ids) {
  // Vocab-parallel: this rank owns rows [start, start + vocab.tp).
  const int64_t per_rank = plan_.vocab_per_rank();
  const int64_t start = plan_.rank().rank * per_rank;
  at::Tensor local = ids - start;
  at::Tensor mine = (local >= 0).logical_and(local < per_rank);
  at::Tensor rows = embed_.index_select(0, local.clamp(0, per_rank - 1));
  if (plan_.rank().world_size > 1) rows = rows * mine.unsqueeze(1).to(dtype_);
  // rows: dtype[tokens, hidden] {tp unreduced}
  return comm_->ReduceScatter(rows, 1);
}

absl::StatusOr<at::Tensor> LlamaModel::Forward(const StepInput& step, KvPool& pool) {
  const int64_t T = static_cast<int64_t>(step.token_ids.size());
  if (T == 0) return absl::InvalidArgumentError("empty step");
  const int64_t d = cfg_.head_dim;
  const int64_t hq = plan_.num_heads_per_rank(), hkv = plan_.num_kv_heads_per_rank();

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
  batch.sliding_window = cfg_.sliding_window.value_or(0);

  at::Tensor logits;
  absl::Status st = CatchTorchErrors("forward", [&]() -> absl::Status {
    std::vector<int64_t> ids64(step.token_ids.begin(), step.token_ids.end());
    std::vector<int64_t> pos64(step.positions.begin(), step.positions.end());
    at::Tensor ids = at::tensor(ids64, at::kLong);
    at::Tensor pos = at::tensor(pos64, at::kFloat);
    // cos, sin: dtype[tokens, 1, head_dim / 2]
    at::Tensor angles = pos.unsqueeze(1) * inv_freq_.unsqueeze(0);
    at::Tensor cos = angles.cos().to(dtype_).unsqueeze(1);
    at::Tensor sin = angles.sin().to(dtype_).unsqueeze(1);

    SHARDLM_ASSIGN_OR_RETURN(at::Tensor x, Embed(ids));  // dtype[tokens, hidden.tp]
    for (size_t li = 0; li < layers_.size(); ++li) {
      const Layer& L = layers_[li];
      SHARDLM_ASSIGN_OR_RETURN(at::Tensor h, comm_->AllGather(x, 1));  // dtype[tokens, hidden]
      h = RmsNorm(h, L.input_norm);
      at::Tensor qkv = L.qkv_bias.defined() ? at::linear(h, L.qkv, L.qkv_bias) : at::linear(h, L.qkv);
      at::Tensor q = qkv.narrow(1, 0, hq * d).view({T, hq, d});
      at::Tensor k = qkv.narrow(1, hq * d, hkv * d).view({T, hkv, d});
      at::Tensor v = qkv.narrow(1, (hq + hkv) * d, hkv * d).view({T, hkv, d});
      if (L.q_norm.defined()) {
        q = RmsNorm(q, L.q_norm);
        k = RmsNorm(k, L.k_norm);
      }
      q = Rotary(q, cos, sin);
      k = Rotary(k, cos, sin);
      at::Tensor k_layer = pool.k().select(0, li), v_layer = pool.v().select(0, li);
      WriteKv(k, v.contiguous(), k_layer, v_layer, batch);
      at::Tensor attn = PagedAttention(q, k_layer, v_layer, batch).view({T, hq * d});
      at::Tensor partial = at::linear(attn, L.o);  // dtype[tokens, hidden] {tp unreduced}
      SHARDLM_ASSIGN_OR_RETURN(at::Tensor reduced, comm_->ReduceScatter(partial, 1));
      x = x + reduced;

      SHARDLM_ASSIGN_OR_RETURN(h, comm_->AllGather(x, 1));
      h = RmsNorm(h, L.post_norm);
      at::Tensor gu = at::linear(h, L.gate_up);  // dtype[tokens, 2 * intermediate.tp]
      const int64_t inter = gu.size(1) / 2;
      at::Tensor act = at::silu(gu.narrow(1, 0, inter)) * gu.narrow(1, inter, inter);
      partial = at::linear(act, L.down);
      SHARDLM_ASSIGN_OR_RETURN(reduced, comm_->ReduceScatter(partial, 1));
      x = x + reduced;
    }
    // Only the rows that need a distribution go through the head.
    std::vector<int64_t> rows;
    for (const SampleRow& r : step.rows) rows.push_back(r.row);
    if (rows.empty()) {
      logits = at::empty({0, cfg_.vocab_size}, at::kFloat);
      return absl::OkStatus();
    }
    at::Tensor sel = x.index_select(0, at::tensor(rows, at::kLong));
    SHARDLM_ASSIGN_OR_RETURN(at::Tensor h, comm_->AllGather(sel, 1));
    h = RmsNorm(h, final_norm_);
    at::Tensor local = at::linear(h, lm_head_).to(at::kFloat);  // f32[rows, vocab.tp]
    SHARDLM_ASSIGN_OR_RETURN(logits, comm_->AllGather(local, 1));
    return absl::OkStatus();
  });
  SHARDLM_RETURN_IF_ERROR(st);
  return logits;
}

}  // namespace shardlm
