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

absl::StatusOr<WeightFormat> ParseWeightFormat(const std::string& flag) {
  if (flag == "auto") return WeightFormat::kAuto;
  if (flag == "dense") return WeightFormat::kDense;
  if (flag == "q8_0") return WeightFormat::kQ8_0;
  if (flag == "q4_0") return WeightFormat::kQ4_0;
  if (flag == "q4_1") return WeightFormat::kQ4_1;
  return InvalidField("weights", "--weights must be auto, dense, q8_0, q4_0 or q4_1, got '" + flag + "'");
}

namespace {

BlockFormat BlockFormatFor(WeightFormat w) {
  switch (w) {
    case WeightFormat::kQ8_0:
      return BlockFormat::kQ8_0;
    case WeightFormat::kQ4_0:
      return BlockFormat::kQ4_0;
    case WeightFormat::kQ4_1:
      return BlockFormat::kQ4_1;
    default:
      return BlockFormat::kNone;
  }
}

// One projection's parts (q, k and v; gate and up; or one weight), each by
// name and full shape, concatenated along the rows.
using Parts = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// The parts as one quantized weight: in `want`, or with `want` kNone each part
// in the file's format (q/k/v may mix Q4_K and Q6_K: one segment each); or an
// undefined weight where they stay dense: a part the file does not keep in a
// format the kernels multiply (with `want` kNone), or a slice of columns off
// the block grid.
absl::StatusOr<kernels::LinearWeight> LoadQuantized(const Checkpoint& ckpt, const ShardPlan& plan,
                                                    const Parts& parts, BlockFormat want) {
  std::vector<kernels::LinearWeight::QuantRows> rows;
  int64_t cols = 0;
  for (const auto& [name, shape] : parts) {
    SHARDLM_ASSIGN_OR_RETURN(QuantShard q, LoadQuantShard(ckpt, plan, name, shape));
    const BlockFormat format = want == BlockFormat::kNone ? q.format : want;
    // Not a block format, or one the CPU kernels do not multiply kept: dequantized at load.
    if (format == BlockFormat::kNone || !HasQuantKernels(format)) return kernels::LinearWeight();
    if (q.format == format) {
      rows.push_back({format, std::move(q.rows)});
      cols = q.cols;
      continue;
    }
    // Quantized at load from the dense shard.
    SHARDLM_ASSIGN_OR_RETURN(at::Tensor dense, LoadShard(ckpt, plan, name, shape, at::kFloat));
    if (dense.size(1) % 32 != 0) return kernels::LinearWeight();
    cols = dense.size(1);
    rows.push_back({format, QuantizeRows(format, dense)});
  }
  return kernels::LinearWeight::PrepareQuantized(rows, cols);
}

}  // namespace

// Reads this rank's shards of the checkpoint's tensors: on the host, then
// moved to the device one tensor at a time; projections quantized where the
// weight format asks and the shard allows (kernels::LinearWeight packs them).
class ShardReader {
 public:
  ShardReader(const Checkpoint& ckpt, const ShardPlan& plan, at::ScalarType dtype, at::Device device,
              WeightFormat weights)
      : ckpt_(ckpt),
        plan_(plan),
        dtype_(dtype),
        device_(device),
        weights_(weights),
        quantize_(device.is_cpu() && weights != WeightFormat::kDense) {}

  bool Has(const std::string& name) const { return ckpt_.Has(name); }

  absl::StatusOr<at::Tensor> Tensor(const std::string& name, std::vector<int64_t> shape) const {
    SHARDLM_ASSIGN_OR_RETURN(at::Tensor t, LoadShard(ckpt_, plan_, name, shape, dtype_));
    if (device_.is_cpu()) return t;
    SHARDLM_RETURN_IF_ERROR(CatchTorchErrors(absl::StrCat("moving ", name, " to ", device_.str()), [&] {
      t = t.to(device_);
      return absl::OkStatus();
    }));
    return t;
  }

  // A projection of `parts` concatenated along the rows: quantized where
  // asked and possible, else dense (`gated`: a gate/up pair, PrepareGated).
  absl::StatusOr<kernels::LinearWeight> Projection(const Parts& parts, bool gated = false) const {
    if (quantize_) {
      SHARDLM_ASSIGN_OR_RETURN(kernels::LinearWeight q,
                               LoadQuantized(ckpt_, plan_, parts, BlockFormatFor(weights_)));
      if (q.defined()) return q;
    }
    std::vector<at::Tensor> dense;
    for (const auto& [name, shape] : parts) {
      SHARDLM_ASSIGN_OR_RETURN(at::Tensor t, Tensor(name, shape));
      dense.push_back(std::move(t));
    }
    at::Tensor w = dense.size() == 1 ? std::move(dense[0]) : at::cat(dense, 0);
    return gated ? kernels::LinearWeight::PrepareGated(std::move(w))
                 : kernels::LinearWeight::Prepare(std::move(w));
  }

  // A table kept in the file's blocks for row lookups (an untied embedding):
  // undefined where it is read dense.
  absl::StatusOr<kernels::LinearWeight> KeptBlocks(const Parts& parts) const {
    if (!quantize_) return kernels::LinearWeight();
    return LoadQuantized(ckpt_, plan_, parts, BlockFormat::kNone);
  }

 private:
  const Checkpoint& ckpt_;
  const ShardPlan& plan_;
  at::ScalarType dtype_;
  at::Device device_;
  WeightFormat weights_;
  bool quantize_;
};

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Load(const ModelConfig& cfg, const Checkpoint& ckpt,
                                                             const ShardPlan& plan, at::ScalarType dtype,
                                                             Communicator* comm, at::Device device,
                                                             WeightFormat weights) {
  if (!device.is_cpu() && weights != WeightFormat::kAuto && weights != WeightFormat::kDense) {
    return InvalidField("weights",
                        "--weights q8_0, q4_0 and q4_1 run on the CPU; on " + device.str() +
                            " weights are dequantized to the compute dtype (--weights auto or dense)");
  }
  std::unique_ptr<LlamaModel> m(new LlamaModel(cfg, plan, dtype, comm, device));
  const ShardReader reader(ckpt, plan, dtype, device, weights);
  SHARDLM_ASSIGN_OR_RETURN(m->final_norm_, reader.Tensor("model.norm.weight", {cfg.hidden_size}));
  SHARDLM_RETURN_IF_ERROR(CatchTorchErrors("preparing the LM head", [&] { return m->LoadHead(reader); }));
  SHARDLM_RETURN_IF_ERROR(CatchTorchErrors("loading layers", [&]() -> absl::Status {
    for (int64_t i = 0; i < cfg.num_layers; ++i) {
      SHARDLM_ASSIGN_OR_RETURN(Layer layer, LoadLayer(reader, cfg, i));
      m->layers_.push_back(std::move(layer));
    }
    m->inv_freq_ = at::tensor(RotaryInverseFrequencies(cfg), at::kFloat);
    return absl::OkStatus();
  }));
  m->weight_bytes_ = m->WeightBytes();
  return m;
}

// A tied embedding is looked up in the LM head's weight, so it is held once.
absl::Status LlamaModel::LoadHead(const ShardReader& reader) {
  const int64_t V = cfg_.vocab_size, H = cfg_.hidden_size;
  if (cfg_.tie_word_embeddings && !reader.Has("lm_head.weight")) {
    SHARDLM_ASSIGN_OR_RETURN(lm_head_, reader.Projection({{"model.embed_tokens.weight", {V, H}}}));
    return absl::OkStatus();
  }
  // Kept in its blocks where the file has them (a step reads one row per token).
  SHARDLM_ASSIGN_OR_RETURN(embed_blocks_, reader.KeptBlocks({{"model.embed_tokens.weight", {V, H}}}));
  if (!embed_blocks_.defined()) {
    SHARDLM_ASSIGN_OR_RETURN(embed_, reader.Tensor("model.embed_tokens.weight", {V, H}));
  }
  SHARDLM_ASSIGN_OR_RETURN(lm_head_, reader.Projection({{"lm_head.weight", {V, H}}}));
  return absl::OkStatus();
}

// Layer i's shards, with q/k/v fused into one product and gate/up into another.
absl::StatusOr<LlamaModel::Layer> LlamaModel::LoadLayer(const ShardReader& reader, const ModelConfig& cfg,
                                                        int64_t i) {
  const int64_t H = cfg.hidden_size, I = cfg.intermediate_size, d = cfg.head_dim;
  const int64_t q_out = cfg.num_heads * d, kv_out = cfg.num_kv_heads * d;
  const std::string p = absl::StrCat("model.layers.", i, ".");
  Layer L;
  SHARDLM_ASSIGN_OR_RETURN(L.input_norm, reader.Tensor(p + "input_layernorm.weight", {H}));
  SHARDLM_ASSIGN_OR_RETURN(L.post_norm, reader.Tensor(p + "post_attention_layernorm.weight", {H}));
  SHARDLM_ASSIGN_OR_RETURN(L.qkv, reader.Projection({{p + "self_attn.q_proj.weight", {q_out, H}},
                                                     {p + "self_attn.k_proj.weight", {kv_out, H}},
                                                     {p + "self_attn.v_proj.weight", {kv_out, H}}}));
  if (cfg.attention_bias) {
    SHARDLM_ASSIGN_OR_RETURN(at::Tensor qb, reader.Tensor(p + "self_attn.q_proj.bias", {q_out}));
    SHARDLM_ASSIGN_OR_RETURN(at::Tensor kb, reader.Tensor(p + "self_attn.k_proj.bias", {kv_out}));
    SHARDLM_ASSIGN_OR_RETURN(at::Tensor vb, reader.Tensor(p + "self_attn.v_proj.bias", {kv_out}));
    L.qkv_bias = at::cat({qb, kb, vb}, 0);
  }
  if (cfg.qk_norm) {
    SHARDLM_ASSIGN_OR_RETURN(L.q_norm, reader.Tensor(p + "self_attn.q_norm.weight", {d}));
    SHARDLM_ASSIGN_OR_RETURN(L.k_norm, reader.Tensor(p + "self_attn.k_norm.weight", {d}));
  }
  SHARDLM_ASSIGN_OR_RETURN(L.o, reader.Projection({{p + "self_attn.o_proj.weight", {H, q_out}}}));
  SHARDLM_ASSIGN_OR_RETURN(
      L.gate_up, reader.Projection({{p + "mlp.gate_proj.weight", {I, H}}, {p + "mlp.up_proj.weight", {I, H}}},
                                   /*gated=*/true));
  SHARDLM_ASSIGN_OR_RETURN(L.down, reader.Projection({{p + "mlp.down_proj.weight", {H, I}}}));
  return L;
}

int64_t LlamaModel::WeightBytes() const {
  int64_t bytes = (embed_.defined() ? embed_.nbytes() : 0) + embed_blocks_.nbytes() + final_norm_.nbytes() +
                  lm_head_.nbytes();
  for (const Layer& L : layers_) {
    for (const at::Tensor* t : {&L.input_norm, &L.qkv_bias, &L.q_norm, &L.k_norm, &L.post_norm}) {
      if (t->defined()) bytes += t->nbytes();
    }
    bytes += L.qkv.nbytes() + L.o.nbytes() + L.gate_up.nbytes() + L.down.nbytes();
  }
  return bytes;
}

int64_t LlamaModel::decode_weight_bytes(int64_t sequences) const {
  const int64_t table = embed_.defined() ? embed_.nbytes() : embed_blocks_.nbytes();
  const int64_t rows = embed_.defined() ? embed_.size(0) : embed_blocks_.out_features();
  return weight_bytes_ - table + (rows > 0 ? sequences * table / rows : 0);
}

namespace {

// Runs fn() as one timed part of the step (kernels/step_profile.h).
template <typename Fn>
auto Timed(kernels::StepPart part, Fn&& fn) {
  kernels::StepPartTimer timer(part);
  return fn();
}

}  // namespace

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
    rows = (embed_.defined()          ? embed_.index_select(0, index)
            : embed_blocks_.defined() ? embed_blocks_.Rows(index)
                                      : lm_head_.Rows(index))
               .to(dtype_)
               .contiguous();
    const int64_t row_bytes = rows.size(1) * rows.element_size();
    for (int64_t t = 0; t < T; ++t) {
      // Another rank's token: zeros here, its row from the reduction.
      if (ip[t] - start != local[t])
        std::memset(static_cast<char*>(rows.data_ptr()) + t * row_bytes, 0, row_bytes);
    }
  } else {
    at::Tensor local = ids - start;
    at::Tensor mine = (local >= 0).logical_and(local < per_rank);
    const at::Tensor index = local.clamp(0, per_rank - 1);
    rows = embed_.defined()          ? embed_.index_select(0, index)
           : embed_blocks_.defined() ? embed_blocks_.Rows(index).to(dtype_)
                                     : lm_head_.Rows(index).to(dtype_);
    if (plan_.rank().world_size > 1) rows = rows * mine.unsqueeze(1).to(dtype_);
  }
  // rows: dtype[tokens, hidden] {tp unreduced}
  return ReduceScatterParts(*comm_, rows, 1, plan_.hidden_parts());
}

void LlamaModel::RotaryTables(const std::vector<int32_t>& positions, std::vector<float>& cos,
                              std::vector<float>& sin) const {
  const int64_t T = static_cast<int64_t>(positions.size()), half = cfg_.head_dim / 2;
  cos.resize(T * half);
  sin.resize(T * half);
  const float* inv = inv_freq_.data_ptr<float>();
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
  std::vector<float> cos_host, sin_host;
  RotaryTables(step.positions, cos_host, sin_host);
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

// x += the projection of `in` by w: with one rank nothing is reduced between
// a projection and its residual add, so the product adds into x itself;
// otherwise the partial products are reduce-scattered over the hidden parts.
absl::Status LlamaModel::AddProjected(at::Tensor& x, const at::Tensor& in, const kernels::LinearWeight& w) {
  if (comm_->rank_info().world_size == 1) {
    kernels::LinearAddTo(x, in, w);
    return absl::OkStatus();
  }
  at::Tensor partial = kernels::Linear(in, w);  // dtype[tokens, hidden] {tp unreduced}
  SHARDLM_ASSIGN_OR_RETURN(at::Tensor reduced, Timed(kernels::StepPart::kCollectives, [&] {
                             return ReduceScatterParts(*comm_, partial, 1, plan_.hidden_parts());
                           }));
  Timed(kernels::StepPart::kElementwise, [&] { kernels::AddInPlace(x, reduced); });
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
    if (!kv_written) kernels::RotaryInPlace(qkv, hq + hkv, d, in.cos, in.sin);
  }
  at::Tensor attn = Timed(kernels::StepPart::kAttention, [&] {
    return AttendLayer(qkv, hq, hkv, d, pool.k(), pool.v(), static_cast<int64_t>(li), batch, kv_written);
  });
  return AddProjected(x, attn, L.o);
}

// Layer li's MLP block: x += down(silu(gate(norm(x))) * up(norm(x))).
absl::Status LlamaModel::MlpBlock(size_t li, at::Tensor& x) {
  const Layer& L = layers_[li];
  SHARDLM_ASSIGN_OR_RETURN(at::Tensor h, GatherNormed(x, L.post_norm));
  at::Tensor act = kernels::LinearSwiGlu(h, L.gate_up);  // dtype[tokens, intermediate.tp]
  return AddProjected(x, act, L.down);
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
