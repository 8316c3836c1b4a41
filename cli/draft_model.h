// --draft-model: speculative decoding's draft model (docs/speculative_decoding.md),
// loaded in this process (the coordinator's) as a single rank with a KV cache
// of its own, beside the target's workers.
//
//   SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<DraftModel> draft,
//                            OpenDraftModel(flags.engine, flags.device, target_tokenizer, target_cfg));
//   if (draft) eo.speculation.draft = draft->proposer.get();  // draft outlives the engine
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/commands.h"
#include "coordinator/engine/draft_proposer.h"
#include "formats/model_config.h"
#include "tokenizer/tokenizer.h"
#include "worker/rank_worker.h"

namespace shardlm {

struct DraftModel {
  std::unique_ptr<RankWorker> worker;
  std::unique_ptr<DraftModelProposer> proposer;
};

// --speculative against --draft-model: "draft" needs the file, "ngram" refuses it.
absl::Status CheckSpeculationFlags(const EngineFlags& engine);

// InvalidArgument naming --draft-model unless the checkpoint `draft`
// tokenizes as the target does (`target`: its tokenizer, null when it has
// none): the same tokens at the same ids (tokenizer.json or the GGUF's
// vocabulary), or, for checkpoints without a tokenizer, the same vocab_size.
absl::Status CheckSameTokenizer(const Tokenizer* target, const ModelConfig& target_cfg,
                                const std::string& draft, const ModelConfig& draft_cfg);

// The draft model the flags name (null when none; the flags checked either
// way), loaded with the target's --dtype, --weights, --kv-dtype and
// --kv-cache-mb on the device rank 0 of the target uses.
absl::StatusOr<std::unique_ptr<DraftModel>> OpenDraftModel(const EngineFlags& engine,
                                                           const DeviceFlags& device, const Tokenizer* target,
                                                           const ModelConfig& target_cfg);

}  // namespace shardlm
