#include "partitioning/shard_plan.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace shardlm {
namespace {

// The rules table: checkpoint-name suffix -> how it is split.
struct Rule {
  const char* suffix;
  ShardKind kind;
  enum Unit { kQHeads, kKvHeads, kIntermediate, kVocabRows, kNone } unit;
};
constexpr Rule kRules[] = {
    {"self_attn.q_proj.weight", ShardKind::kColumn, Rule::kQHeads},
    {"self_attn.q_proj.bias", ShardKind::kColumn, Rule::kQHeads},
    {"self_attn.k_proj.weight", ShardKind::kColumn, Rule::kKvHeads},
    {"self_attn.k_proj.bias", ShardKind::kColumn, Rule::kKvHeads},
    {"self_attn.v_proj.weight", ShardKind::kColumn, Rule::kKvHeads},
    {"self_attn.v_proj.bias", ShardKind::kColumn, Rule::kKvHeads},
    {"self_attn.o_proj.weight", ShardKind::kRow, Rule::kQHeads},
    {"mlp.gate_proj.weight", ShardKind::kColumn, Rule::kIntermediate},
    {"mlp.up_proj.weight", ShardKind::kColumn, Rule::kIntermediate},
    {"mlp.down_proj.weight", ShardKind::kRow, Rule::kIntermediate},
    {"embed_tokens.weight", ShardKind::kVocab, Rule::kVocabRows},
    {"lm_head.weight", ShardKind::kVocab, Rule::kVocabRows},
};

const Rule* FindRule(const std::string& name) {
  for (const Rule& r : kRules) {
    if (absl::EndsWith(name, r.suffix)) return &r;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<ShardPlan> ShardPlan::Make(const ModelConfig& cfg, RankInfo rank) {
  const int64_t n = rank.world_size;
  if (n < 1 || rank.rank < 0 || rank.rank >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank.rank, " is outside world size ", rank.world_size));
  }
  // Every dimension cut across ranks must divide evenly.
  const std::vector<std::pair<const char*, int64_t>> dims = {{"num_attention_heads", cfg.num_heads},
                                                             {"hidden_size", cfg.hidden_size},
                                                             {"intermediate_size", cfg.intermediate_size},
                                                             {"vocab_size", cfg.vocab_size}};
  for (const auto& [name, size] : dims) {
    if (size % n != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor parallel size ", n, " does not divide ", name, " = ", size));
    }
  }
  if (cfg.num_kv_heads % n != 0 && n % cfg.num_kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor parallel size ", n,
                     " must divide or be a multiple of num_key_value_heads = ", cfg.num_kv_heads));
  }
  ShardPlan plan;
  plan.rank_ = rank;
  plan.head_dim_ = cfg.head_dim;
  plan.num_heads_per_rank_ = cfg.num_heads / n;
  plan.hidden_per_rank_ = cfg.hidden_size / n;
  plan.intermediate_per_rank_ = cfg.intermediate_size / n;
  plan.vocab_per_rank_ = cfg.vocab_size / n;
  if (cfg.num_kv_heads >= n) {
    plan.num_kv_heads_per_rank_ = cfg.num_kv_heads / n;
    plan.kv_head_start_ = rank.rank * plan.num_kv_heads_per_rank_;
  } else {
    // Replicate: query head h uses KV head h / (num_heads / num_kv_heads).
    plan.num_kv_heads_per_rank_ = 1;
    const int64_t group = cfg.num_heads / cfg.num_kv_heads;
    plan.kv_head_start_ = (rank.rank * plan.num_heads_per_rank_) / group;
  }
  return plan;
}

SliceSpec ShardPlan::SliceFor(const std::string& name) const {
  const Rule* rule = FindRule(name);
  SliceSpec s;
  if (rule == nullptr || rank_.world_size == 1) return s;
  s.kind = rule->kind;
  s.dim = rule->kind == ShardKind::kRow ? 1 : 0;
  const int64_t r = rank_.rank;
  switch (rule->unit) {
    case Rule::kQHeads:
      s.length = num_heads_per_rank_ * head_dim_;
      s.start = r * s.length;
      break;
    case Rule::kKvHeads:
      s.length = num_kv_heads_per_rank_ * head_dim_;
      s.start = kv_head_start_ * head_dim_;
      break;
    case Rule::kIntermediate:
      s.length = intermediate_per_rank_;
      s.start = r * s.length;
      break;
    case Rule::kVocabRows:
      s.length = vocab_per_rank_;
      s.start = r * s.length;
      break;
    case Rule::kNone:
      break;
  }
  return s;
}

}  // namespace shardlm
