#include "partitioning/shard_plan.h"

#include <algorithm>
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

// Rank r's part of `total` units split as evenly as possible over n ranks: the
// first total % n ranks hold one more (9 heads on 2 ranks: 5 and 4).
struct Part {
  int64_t start, length;
};
Part EvenPart(int64_t total, int64_t n, int64_t r) {
  const int64_t base = total / n, extra = total % n;
  return {r * base + std::min(r, extra), base + (r < extra ? 1 : 0)};
}

// Rank r's part of the FFN: whole blocks of cfg.intermediate_block (a K-quant
// down projection's 256: Qwen2.5-Coder-1.5B's 8960 on 2 ranks is 4608 and
// 4352, not 4480 each, which would cut a block) where there are at least as
// many blocks as ranks; else as evenly as possible.
Part FfnPart(const ModelConfig& cfg, int64_t n, int64_t r) {
  const int64_t g = std::max<int64_t>(1, cfg.intermediate_block);
  const int64_t units = (cfg.intermediate_size + g - 1) / g;
  if (g == 1 || units < n) return EvenPart(cfg.intermediate_size, n, r);
  const Part p = EvenPart(units, n, r);
  const int64_t start = p.start * g, end = std::min(cfg.intermediate_size, (p.start + p.length) * g);
  return {start, end - start};
}

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
  // Query heads are the finest unit attention can be cut into; the FFN splits anywhere.
  if (n > cfg.num_heads) {
    return absl::InvalidArgumentError(absl::StrCat("tensor parallel size ", n,
                                                   " is more than num_attention_heads = ", cfg.num_heads,
                                                   ": every rank needs at least one query head"));
  }
  for (const auto& [name, size] :
       std::vector<std::pair<const char*, int64_t>>{{"intermediate_size", cfg.intermediate_size},
                                                    {"hidden_size", cfg.hidden_size},
                                                    {"vocab_size", cfg.vocab_size}}) {
    if (n > size)
      return absl::InvalidArgumentError(
          absl::StrCat("tensor parallel size ", n, " is more than ", name, " = ", size));
  }
  ShardPlan plan;
  plan.rank_ = rank;
  plan.head_dim_ = cfg.head_dim;
  const Part q = EvenPart(cfg.num_heads, n, rank.rank);
  plan.q_head_start_ = q.start;
  plan.num_heads_per_rank_ = q.length;
  // The KV heads this rank's query heads read (query head h reads KV head h / group):
  // a KV head whose group spans two ranks is held by both.
  plan.kv_group_ = cfg.num_heads / cfg.num_kv_heads;
  plan.kv_head_start_ = q.start / plan.kv_group_;
  plan.num_kv_heads_per_rank_ = (q.start + q.length - 1) / plan.kv_group_ + 1 - plan.kv_head_start_;
  const Part ffn = FfnPart(cfg, n, rank.rank);
  plan.intermediate_start_ = ffn.start;
  plan.intermediate_per_rank_ = ffn.length;
  // The residual stream and the vocabulary: the collectives carry these parts
  // (collectives/uneven.h).
  for (int64_t r = 0; r < n; ++r) {
    plan.hidden_parts_.push_back(EvenPart(cfg.hidden_size, n, r).length);
    plan.vocab_parts_.push_back(EvenPart(cfg.vocab_size, n, r).length);
  }
  plan.vocab_start_ = EvenPart(cfg.vocab_size, n, rank.rank).start;
  return plan;
}

SliceSpec ShardPlan::SliceFor(const std::string& name) const {
  const Rule* rule = FindRule(name);
  SliceSpec s;
  if (rule == nullptr || rank_.world_size == 1) return s;
  s.kind = rule->kind;
  s.dim = rule->kind == ShardKind::kRow ? 1 : 0;
  switch (rule->unit) {
    case Rule::kQHeads:
      s.length = num_heads_per_rank_ * head_dim_;
      s.start = q_head_start_ * head_dim_;
      break;
    case Rule::kKvHeads:
      s.length = num_kv_heads_per_rank_ * head_dim_;
      s.start = kv_head_start_ * head_dim_;
      break;
    case Rule::kIntermediate:
      s.length = intermediate_per_rank_;
      s.start = intermediate_start_;
      break;
    case Rule::kVocabRows:
      s.length = vocab_per_rank();
      s.start = vocab_start_;
      break;
    case Rule::kNone:
      break;
  }
  return s;
}

}  // namespace shardlm
