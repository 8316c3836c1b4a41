// The Llama-family decoder (Llama 2/3, Mistral, Qwen2, Qwen3) on one rank of
// a tensor-parallel group, 1D weight-stationary (seed 002):
//
//   x_shard  dtype[tokens, hidden.tp]                 residual stream
//   each block:  h = all_gather(x_shard) -> norm -> column-parallel matmul
//                -> local attention (or SwiGLU) -> row-parallel matmul
//                -> x_shard += reduce_scatter(partial {tp unreduced})
//   embedding and LM head are vocab-parallel.
//
// At world size 1 every collective is the identity, so the single-rank
// engine runs this same code.
//
//   SHARDLM_ASSIGN_OR_RETURN(auto model, LlamaModel::Load(cfg, *ckpt, plan, at::kFloat, comm));
//   SHARDLM_ASSIGN_OR_RETURN(at::Tensor logits, model->Forward(step, pool));
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "formats/checkpoint.h"
#include "formats/model_config.h"
#include "kernels/attention.h"
#include "kernels/linear.h"
#include "kv/kv_pool.h"
#include "partitioning/shard_plan.h"
#include "step/step.h"

namespace shardlm {

// What the projections' weights (q/k/v, o, gate/up, down, the LM head) are
// kept as (--weights; docs/quantized_weights.md). kAuto: as the file has them
// on the CPU (a GGUF's blocks stay quantized but for Q2_K and Q3_K); on a GPU,
// and for every other tensor, the compute dtype. kBlocks: as the file has them
// on either device (on a GPU in the planes of the few-row product,
// docs/gpu_quantized.md; what kAuto will do there once it has run on one).
// kDense: the compute dtype. kQ8_0 ... kQ6_K: that block format, quantized
// at load where the file has another; on a GPU kept in planes.
enum class WeightFormat { kAuto, kBlocks, kDense, kQ8_0, kQ4_0, kQ4_1, kQ4_K, kQ5_K, kQ6_K };
absl::StatusOr<WeightFormat> ParseWeightFormat(const std::string& flag);

class ShardReader;  // llama_model.cc: reads this rank's shards of a checkpoint

class LlamaModel {
 public:
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Load(const ModelConfig& cfg, const Checkpoint& ckpt,
                                                          const ShardPlan& plan, at::ScalarType dtype,
                                                          Communicator* comm, at::Device device = at::kCPU,
                                                          WeightFormat weights = WeightFormat::kAuto);

  // Runs the step's tokens through every layer, writing their K/V into `pool`,
  // and returns f32[rows, vocab] on rank 0: full logits for step.rows, in
  // order, on the model's device. Other ranks (which do not sample) get an
  // empty tensor.
  absl::StatusOr<at::Tensor> Forward(const StepInput& step, KvPool& pool);

  // A step's inputs as tensors on the model's device (on the CPU, views of
  // host arrays): what ForwardTensors reads.
  struct StepTensors {
    at::Tensor ids;       // int64[tokens]
    at::Tensor cos, sin;  // f32[tokens, head_dim / 2] (RotaryTables)
    // The windowed layers' tables where their RoPE base differs (Gemma 3), else undefined.
    at::Tensor cos_local, sin_local;
    at::Tensor row_index;  // int64[rows]: the tokens whose logits come back, in order
  };
  // The layers and the head over inputs already in place, `batch` holding the
  // attention's arrays: Forward stages a step and calls this, and a CUDA graph
  // (model/step_graphs.h) captures it over static buffers.
  absl::StatusOr<at::Tensor> ForwardTensors(const StepTensors& in, const AttentionBatch& batch, KvPool& pool);
  // Each position's rotary cos and sin, f32[positions, head_dim / 2]
  // row-major, rounded through the compute dtype as Hugging Face does
  // (cos.to(x.dtype)).
  void RotaryTables(const std::vector<int32_t>& positions, std::vector<float>& cos, std::vector<float>& sin,
                    bool local = false) const;

  const ModelConfig& config() const { return cfg_; }
  const ShardPlan& plan() const { return plan_; }
  // The model's part of an attention batch: the sliding window and which KV head
  // each of this rank's query heads reads.
  void SetAttentionLayout(AttentionBatch& batch) const;
  at::ScalarType dtype() const { return dtype_; }
  at::Device device() const { return device_; }
  // Bytes of this rank's weights, all of them.
  int64_t weight_bytes() const { return weight_bytes_; }
  // Bytes a decode step of `sequences` reads of them: every weight but an
  // untied embedding table, of which it gathers one row per sequence (a tied
  // one is the LM head, streamed whole).
  int64_t decode_weight_bytes(int64_t sequences) const;

  // Replaces the communicator the forward pass uses, returning the one it
  // used (RankWorker's warm-up runs on a stand-in: collectives/communicator.h).
  Communicator* SwapCommunicator(Communicator* comm) {
    std::swap(comm, comm_);
    return comm;
  }

 private:
  struct Layer {
    at::Tensor input_norm;      // dtype[hidden]
    kernels::LinearWeight qkv;  // dtype[(heads.tp + 2 kv_heads.tp) * head_dim, hidden]
    at::Tensor qkv_bias;        // dtype[(heads.tp + 2 kv_heads.tp) * head_dim] or undefined
    at::Tensor q_norm, k_norm;  // dtype[head_dim] or undefined
    kernels::LinearWeight o;    // dtype[hidden, heads.tp * head_dim]
    at::Tensor post_norm;       // dtype[hidden]: the norm before the MLP
    // Gemma 3: the norms of the attention's and the MLP's outputs, else undefined.
    at::Tensor attn_out_norm, mlp_out_norm;  // dtype[hidden]
    kernels::LinearWeight gate_up;           // dtype[2 * intermediate.tp, hidden]
    kernels::LinearWeight down;              // dtype[hidden, intermediate.tp]
  };

  LlamaModel(const ModelConfig& cfg, const ShardPlan& plan, at::ScalarType dtype, Communicator* comm,
             at::Device device)
      : cfg_(cfg), plan_(plan), dtype_(dtype), device_(device), comm_(comm) {}

  // Load's parts (llama_model.cc): the embedding and LM head, one layer, the bytes held.
  absl::Status LoadHead(const ShardReader& reader);
  static absl::StatusOr<Layer> LoadLayer(const ShardReader& reader, const ModelConfig& cfg, int64_t i);
  int64_t WeightBytes() const;

  absl::StatusOr<at::Tensor> Embed(const at::Tensor& ids);
  at::Tensor EmbeddingRows(const at::Tensor& index) const;
  // ForwardTensors' parts (llama_model.cc says what each does).
  absl::Status AttentionBlock(size_t li, at::Tensor& x, const StepTensors& in, const AttentionBatch& batch,
                              KvPool& pool);
  absl::Status MlpBlock(size_t li, at::Tensor& x);
  absl::Status AddProjected(at::Tensor& x, const at::Tensor& in, const kernels::LinearWeight& w,
                            const at::Tensor& out_norm = at::Tensor());
  absl::StatusOr<at::Tensor> GatherNormed(const at::Tensor& x, const at::Tensor& weight);
  absl::StatusOr<at::Tensor> Head(const at::Tensor& x, const StepTensors& in);

  ModelConfig cfg_;
  ShardPlan plan_;
  at::ScalarType dtype_;
  at::Device device_;
  Communicator* comm_;
  at::Tensor embed_;                    // dtype[vocab.tp, hidden]; undefined when tied or kept in blocks
  kernels::LinearWeight embed_blocks_;  // the embedding kept in its blocks (rows looked up), or undefined
  kernels::LinearWeight lm_head_;       // dtype[vocab.tp, hidden]
  at::Tensor final_norm_;
  at::Tensor inv_freq_;        // f32[head_dim / 2]
  at::Tensor inv_freq_local_;  // the windowed layers' (Gemma 3), or undefined
  std::vector<Layer> layers_;
  int64_t weight_bytes_ = 0;
};

// inv_freq of rotary embeddings, with llama3 scaling when configured; with
// `theta` > 0, of that base instead of cfg.rope_theta.
std::vector<float> RotaryInverseFrequencies(const ModelConfig& cfg, double theta = 0.0);

}  // namespace shardlm
