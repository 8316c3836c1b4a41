// How one rank's shard of a Llama-family model is cut (1D weight-stationary).
//
// The rules are one table over checkpoint tensor names:
//   column-parallel (split dim 0, output features): q/k/v_proj, gate/up_proj
//   row-parallel    (split dim 1, input features):  o_proj, down_proj
//   vocab-parallel  (split dim 0, vocabulary):      embed_tokens, lm_head
//   replicated:                                     norms, q_norm/k_norm
// q/o are cut by query heads, k/v by KV heads; with fewer KV heads than ranks
// each KV head is replicated onto the ranks whose query heads use it.
//
//   SHARDLM_ASSIGN_OR_RETURN(ShardPlan plan, ShardPlan::Make(cfg, {rank, world}));
//   SliceSpec s = plan.SliceFor("model.layers.0.self_attn.k_proj.weight");
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "model/model_config.h"

namespace shardlm {

enum class ShardKind { kColumn, kRow, kVocab, kReplicated };

// Rows or columns [start, start + length) of `dim`; dim = -1 means the whole tensor.
struct SliceSpec {
  ShardKind kind = ShardKind::kReplicated;
  int dim = -1;
  int64_t start = 0;
  int64_t length = 0;
};

class ShardPlan {
 public:
  // InvalidArgument naming the dimension and sizes when `world` does not divide the model.
  static absl::StatusOr<ShardPlan> Make(const ModelConfig& cfg, RankInfo rank);

  // The slice of `name` (a checkpoint tensor name) this rank holds. Unknown
  // names are replicated.
  SliceSpec SliceFor(const std::string& name) const;

  RankInfo rank() const { return rank_; }
  int64_t num_heads_per_rank() const { return num_heads_per_rank_; }
  int64_t num_kv_heads_per_rank() const { return num_kv_heads_per_rank_; }
  int64_t kv_head_start() const { return kv_head_start_; }
  int64_t hidden_per_rank() const { return hidden_per_rank_; }
  int64_t intermediate_per_rank() const { return intermediate_per_rank_; }
  int64_t vocab_per_rank() const { return vocab_per_rank_; }

 private:
  ShardKind KindFor(const std::string& name) const;

  RankInfo rank_;
  int64_t head_dim_ = 0;
  int64_t num_heads_per_rank_ = 0;
  int64_t num_kv_heads_per_rank_ = 0;
  int64_t kv_head_start_ = 0;
  int64_t hidden_per_rank_ = 0;
  int64_t intermediate_per_rank_ = 0;
  int64_t vocab_per_rank_ = 0;
};

}  // namespace shardlm
