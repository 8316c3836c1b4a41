// LlamaModel's loading (model/llama_model.h): this rank's shards of the
// checkpoint's tensors read into the layers, projections kept in their blocks
// where the weight format and the shard allow (kernels::LinearWeight).
#include <ATen/ATen.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "kernels/linear.h"
#include "model/llama_model.h"
#include "partitioning/shard_loader.h"

namespace shardlm {

absl::StatusOr<WeightFormat> ParseWeightFormat(const std::string& flag) {
  if (flag == "auto") return WeightFormat::kAuto;
  if (flag == "blocks") return WeightFormat::kBlocks;
  if (flag == "dense") return WeightFormat::kDense;
  if (flag == "q8_0") return WeightFormat::kQ8_0;
  if (flag == "q4_0") return WeightFormat::kQ4_0;
  if (flag == "q4_1") return WeightFormat::kQ4_1;
  if (flag == "q4_k") return WeightFormat::kQ4_K;
  if (flag == "q5_k") return WeightFormat::kQ5_K;
  if (flag == "q6_k") return WeightFormat::kQ6_K;
  return InvalidField(
      "weights",
      "--weights must be auto, blocks, dense, q8_0, q4_0, q4_1, q4_k, q5_k or q6_k, got '" + flag + "'");
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
    case WeightFormat::kQ4_K:
      return BlockFormat::kQ4_K;
    case WeightFormat::kQ5_K:
      return BlockFormat::kQ5_K;
    case WeightFormat::kQ6_K:
      return BlockFormat::kQ6_K;
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
// the block grid. `why` says which, where the file or `want` had blocks.
absl::StatusOr<kernels::LinearWeight> LoadQuantized(const Checkpoint& ckpt, const ShardPlan& plan,
                                                    const Parts& parts, BlockFormat want, at::Device device,
                                                    std::string* why) {
  std::vector<kernels::LinearWeight::QuantRows> rows;
  int64_t cols = 0;
  for (const auto& [name, shape] : parts) {
    SHARDLM_ASSIGN_OR_RETURN(QuantShard q, LoadQuantShard(ckpt, plan, name, shape));
    const BlockFormat format = want == BlockFormat::kNone ? q.format : want;
    if (format == BlockFormat::kNone) {
      // The file's blocks, left unread: a format no kernel keeps, or this rank's columns off their grid.
      SHARDLM_ASSIGN_OR_RETURN(const TensorView* view, ckpt.Get(name));
      if (view->block != BlockFormat::kNone) {
        *why = HasQuantKernels(view->block)
                   ? absl::StrCat(name, ": this rank's columns are not whole ", BlockFormatName(view->block),
                                  " blocks of ", BlockLayoutOf(view->block).elements)
                   : absl::StrCat(name, ": ", BlockFormatName(view->block), " is dequantized at load");
      }
      return kernels::LinearWeight();
    }
    // Every format here is one both devices keep (LoadQuantShard reads no other; --weights asks
    // for no other; GpuQuantFormat is HasQuantKernels).
    if (q.format == format) {
      rows.push_back({format, std::move(q.rows)});
      cols = q.cols;
      continue;
    }
    // Quantized at load from the dense shard.
    SHARDLM_ASSIGN_OR_RETURN(at::Tensor dense, LoadShard(ckpt, plan, name, shape, at::kFloat));
    if (dense.size(1) % BlockLayoutOf(format).elements != 0) {
      *why = absl::StrCat(name, ": this rank's ", dense.size(1), " columns are not whole ",
                          BlockFormatName(format), " blocks of ", BlockLayoutOf(format).elements);
      return kernels::LinearWeight();
    }
    cols = dense.size(1);
    rows.push_back({format, QuantizeRows(format, dense)});
  }
  if (device.is_cpu()) return kernels::LinearWeight::PrepareQuantized(rows, cols);
  return kernels::LinearWeight::PrepareGpuQuantized(rows, cols, device);
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
        // On a GPU only where blocks or a format are asked for: --weights auto
        // dequantizes there until the blocks' product has run on one
        // (docs/gpu_quantized.md).
        quantize_(device.is_cpu() ? weights != WeightFormat::kDense
                                  : weights != WeightFormat::kAuto && weights != WeightFormat::kDense) {}

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
      std::string why;
      SHARDLM_ASSIGN_OR_RETURN(kernels::LinearWeight q,
                               LoadQuantized(ckpt_, plan_, parts, BlockFormatFor(weights_), device_, &why));
      if (q.defined()) return q;
      if (!why.empty()) dense_.push_back(std::move(why));
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
    if (!quantize_ || !device_.is_cpu()) return kernels::LinearWeight();
    std::string why;
    return LoadQuantized(ckpt_, plan_, parts, BlockFormat::kNone, device_, &why);
  }

  // Why projections that were to keep blocks stay dense (one line each).
  const std::vector<std::string>& dense() const { return dense_; }

 private:
  const Checkpoint& ckpt_;
  const ShardPlan& plan_;
  at::ScalarType dtype_;
  at::Device device_;
  WeightFormat weights_;
  bool quantize_;
  mutable std::vector<std::string> dense_;
};

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Load(const ModelConfig& cfg, const Checkpoint& ckpt,
                                                             const ShardPlan& plan, at::ScalarType dtype,
                                                             Communicator* comm, at::Device device,
                                                             WeightFormat weights) {
  if (!device.is_cpu() && !device.is_cuda() && weights != WeightFormat::kAuto &&
      weights != WeightFormat::kDense) {
    return InvalidField("weights",
                        "--weights blocks and the block formats run on the CPU and CUDA; on " + device.str() +
                            " weights are dequantized to the compute dtype (--weights auto or dense)");
  }
  if (cfg.arch == Arch::kGemma3 && !device.is_cpu()) {
    return absl::InvalidArgumentError(
        "Gemma 3 runs on the CPU only for now (its per-layer windows and RoPE "
        "bases are not in the GPU step); use --device cpu");
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
    if (cfg.rope_local_theta > 0 && cfg.rope_local_theta != cfg.rope_theta)
      m->inv_freq_local_ = at::tensor(RotaryInverseFrequencies(cfg, cfg.rope_local_theta), at::kFloat);
    return absl::OkStatus();
  }));
  m->weight_bytes_ = m->WeightBytes();
  if (!reader.dense().empty()) {
    LOG(INFO) << "weights: " << reader.dense().size() << " projection(s) stay dense (" << c10::toString(dtype)
              << "): " << reader.dense().front() << (reader.dense().size() > 1 ? "; ..." : "");
  }
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
  if (cfg.block_output_norms) {  // Gemma 3: a norm before the MLP and after each block
    SHARDLM_ASSIGN_OR_RETURN(L.post_norm, reader.Tensor(p + "pre_feedforward_layernorm.weight", {H}));
    SHARDLM_ASSIGN_OR_RETURN(L.attn_out_norm, reader.Tensor(p + "post_attention_layernorm.weight", {H}));
    SHARDLM_ASSIGN_OR_RETURN(L.mlp_out_norm, reader.Tensor(p + "post_feedforward_layernorm.weight", {H}));
  } else {
    SHARDLM_ASSIGN_OR_RETURN(L.post_norm, reader.Tensor(p + "post_attention_layernorm.weight", {H}));
  }
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
                                   /*gated=*/cfg.hidden_act == Activation::kSilu));
  SHARDLM_ASSIGN_OR_RETURN(L.down, reader.Projection({{p + "mlp.down_proj.weight", {H, I}}}));
  return L;
}

int64_t LlamaModel::WeightBytes() const {
  int64_t bytes = (embed_.defined() ? embed_.nbytes() : 0) + embed_blocks_.nbytes() + final_norm_.nbytes() +
                  lm_head_.nbytes();
  for (const Layer& L : layers_) {
    for (const at::Tensor* t : {&L.input_norm, &L.qkv_bias, &L.q_norm, &L.k_norm, &L.post_norm,
                                &L.attn_out_norm, &L.mlp_out_norm}) {
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

}  // namespace shardlm
