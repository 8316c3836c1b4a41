#include "cli/draft_model.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "model/device.h"

namespace shardlm {
namespace {

absl::Status Refused(const std::string& draft, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("--draft-model ", draft,
                                                 " does not share the target's tokenizer: ", why,
                                                 " (the draft's proposals are token ids of the target)"));
}

}  // namespace

absl::Status CheckSpeculationFlags(const EngineFlags& engine) {
  if (engine.speculative == "draft" && !engine.draft_model) {
    return absl::InvalidArgumentError("--speculative draft needs --draft-model FILE");
  }
  if (engine.speculative == "ngram" && engine.draft_model) {
    return absl::InvalidArgumentError(
        "--speculative ngram proposes by prompt lookup; --draft-model goes with --speculative draft (or "
        "alone)");
  }
  return absl::OkStatus();
}

absl::Status CheckSameTokenizer(const Tokenizer* target, const ModelConfig& target_cfg,
                                const std::string& draft, const ModelConfig& draft_cfg) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> d = Tokenizer::ForModel(draft);
  if (!d.ok() && !absl::IsNotFound(d.status())) return d.status();
  if (target == nullptr && !d.ok()) {
    // Token ids are all there is: the vocabularies must be the same size.
    if (target_cfg.vocab_size != draft_cfg.vocab_size) {
      return Refused(draft, absl::StrCat("neither has a tokenizer, and their vocab_size differ (",
                                         target_cfg.vocab_size, " and ", draft_cfg.vocab_size, ")"));
    }
    return absl::OkStatus();
  }
  if ((target != nullptr) != d.ok()) {
    return Refused(draft, target != nullptr ? "the draft has no tokenizer" : "the target has none");
  }
  const Tokenizer& a = *target;
  const Tokenizer& b = **d;
  if (a.vocab_size() != b.vocab_size()) {
    return Refused(
        draft, absl::StrCat("its vocabulary has ", b.vocab_size(), " tokens, the target's ", a.vocab_size()));
  }
  for (int32_t id = 0; id < a.vocab_size(); ++id) {
    if (a.TokenBytes(id, false) != b.TokenBytes(id, false) || a.IsSpecial(id) != b.IsSpecial(id)) {
      return Refused(draft, absl::StrCat("token ", id, " differs"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DraftModel>> OpenDraftModel(const EngineFlags& engine,
                                                           const DeviceFlags& device, const Tokenizer* target,
                                                           const ModelConfig& target_cfg) {
  SHARDLM_RETURN_IF_ERROR(CheckSpeculationFlags(engine));
  if (!engine.draft_model) return nullptr;
  const std::string& path = *engine.draft_model;
  absl::StatusOr<ModelConfig> cfg = LoadModelConfig(path);
  if (!cfg.ok()) {
    return absl::Status(cfg.status().code(),
                        absl::StrCat("--draft-model ", path, ": ", cfg.status().message()));
  }
  SHARDLM_RETURN_IF_ERROR(CheckSameTokenizer(target, target_cfg, path, *cfg));
  RankWorkerOptions o;
  o.model_dir = path;
  EngineFlags draft_flags = engine;
  if (engine.draft_weights) draft_flags.storage.weights = *engine.draft_weights;
  SHARDLM_RETURN_IF_ERROR(ApplyWorkerFlags(draft_flags, device, &o));
  // Rank 0's device: with --device cuda, GPU 0 holds the draft beside its shard.
  SHARDLM_ASSIGN_OR_RETURN(o.device, ResolveDevice(device.device, 0));
  auto draft = std::make_unique<DraftModel>();
  absl::StatusOr<std::unique_ptr<RankWorker>> worker = RankWorker::Load(o, MakeSingleRankCommunicator());
  if (!worker.ok()) {
    return absl::Status(worker.status().code(),
                        absl::StrCat("--draft-model ", path, ": ", worker.status().message()));
  }
  draft->worker = std::move(*worker);
  LOG(INFO) << "draft model " << path << " in this process on " << draft->worker->device().str() << ": "
            << draft->worker->num_blocks() << " KV blocks of " << draft->worker->block_size() << " tokens";
  DraftModelProposer::Options po;
  po.max_position = draft->worker->config().max_position_embeddings;
  po.min_probability = engine.draft_p_min;
  draft->proposer = std::make_unique<DraftModelProposer>(
      draft->worker.get(), static_cast<int32_t>(draft->worker->num_blocks()),
      static_cast<int32_t>(draft->worker->block_size()), target_cfg.eos_token_ids, po);
  return draft;
}

}  // namespace shardlm
