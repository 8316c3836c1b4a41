// How one rank's shard of a Llama-family model is cut (1D weight-stationary).
//
// The rules are one table over checkpoint tensor names:
//   column-parallel (split dim 0, output features): q/k/v_proj, gate/up_proj
//   row-parallel    (split dim 1, input features):  o_proj, down_proj
//   vocab-parallel  (split dim 0, vocabulary):      embed_tokens, lm_head
//   replicated:                                     norms, q_norm/k_norm
// q/o are cut by query heads, k/v by KV heads. Query heads and the FFN split as
// evenly as possible when the world size does not divide them (9 heads on 2
// ranks: 5 and 4; vLLM and TensorRT-LLM refuse this), the FFN in whole blocks
// of a GGUF's down projection (ModelConfig::intermediate_block). Each rank holds the KV
// heads its query heads read (query head h reads KV head h / kv_group), so a
// KV head whose group spans two ranks, or that serves several ranks when there
// are fewer KV heads than ranks, is replicated onto each of them:
//   9 heads, 3 KV heads (group 3), 2 ranks:
//     rank 0: q heads 0-4, KV heads 0-1 (q 0,1,2 -> KV 0; q 3,4 -> KV 1)
//     rank 1: q heads 5-8, KV heads 1-2 (q 5 -> KV 1; q 6,7,8 -> KV 2)
// Local query head i then reads local KV head (i + q_head_offset()) / kv_group().
// The residual stream (hidden) and the vocabulary split the same way, and the
// collectives carry their unequal parts (collectives/uneven.h). Any world size
// up to the number of query heads works.
//
//   SHARDLM_ASSIGN_OR_RETURN(ShardPlan plan, ShardPlan::Make(cfg, {rank, world}));
//   SliceSpec s = plan.SliceFor("model.layers.0.self_attn.k_proj.weight");
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "formats/model_config.h"

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
  // InvalidArgument naming the dimension and sizes when the model cannot be cut `world` ways.
  static absl::StatusOr<ShardPlan> Make(const ModelConfig& cfg, RankInfo rank);

  // The slice of `name` (a checkpoint tensor name) this rank holds. Unknown
  // names are replicated.
  SliceSpec SliceFor(const std::string& name) const;

  RankInfo rank() const { return rank_; }
  int64_t q_head_start() const { return q_head_start_; }
  int64_t num_heads_per_rank() const { return num_heads_per_rank_; }
  // Global query heads per KV head, and the position of this rank's first query
  // head inside its KV head's group: local query head i reads local KV head
  // (i + q_head_offset()) / kv_group().
  int64_t kv_group() const { return kv_group_; }
  int64_t q_head_offset() const { return q_head_start_ - kv_head_start_ * kv_group_; }
  int64_t num_kv_heads_per_rank() const { return num_kv_heads_per_rank_; }
  int64_t kv_head_start() const { return kv_head_start_; }
  int64_t hidden_per_rank() const { return hidden_parts_[rank_.rank]; }
  // Every rank's part of the residual stream and of the vocabulary, in rank order.
  const std::vector<int64_t>& hidden_parts() const { return hidden_parts_; }
  const std::vector<int64_t>& vocab_parts() const { return vocab_parts_; }
  int64_t vocab_start() const { return vocab_start_; }
  int64_t intermediate_per_rank() const { return intermediate_per_rank_; }
  int64_t vocab_per_rank() const { return vocab_parts_[rank_.rank]; }

 private:
  ShardKind KindFor(const std::string& name) const;

  RankInfo rank_;
  int64_t head_dim_ = 0;
  int64_t q_head_start_ = 0;
  int64_t num_heads_per_rank_ = 0;
  int64_t kv_group_ = 1;
  int64_t num_kv_heads_per_rank_ = 0;
  int64_t kv_head_start_ = 0;
  std::vector<int64_t> hidden_parts_;
  int64_t intermediate_start_ = 0;
  int64_t intermediate_per_rank_ = 0;
  std::vector<int64_t> vocab_parts_;
  int64_t vocab_start_ = 0;
};

}  // namespace shardlm
