// The client side of shardlm.v1.Inference, for the CLI's --server mode.
// Results come back in the same shapes the in-process engine produces, so the
// commands print them the same way.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "constraints/constraint.h"
#include "coordinator/engine/engine.h"
#include "shardlm/v1/inference.pb.h"

namespace shardlm {

struct PromptSpec {
  bool is_text = false;
  std::string text;
  std::vector<int32_t> ids;
};

// The Generate message for `request` (all but the prompt): sampling, limits,
// stop strings and ids, prefix handle. Shared by `generate --server` and
// `batch --server`, so both send the same fields.
::shardlm::v1::GenerateRequest GenerateRequestProto(const EngineRequest& request,
                                                    const std::vector<std::string>& stop,
                                                    const ConstraintSpec& constraint = {});

// Streams a generation; `on_text` gets each text delta as it arrives.
// Returns the result and the whole text.
// `request.prefix_handle` and `stop` are sent as given.
absl::StatusOr<std::pair<EngineResult, std::string>> RemoteGenerate(
    const std::string& server, const PromptSpec& prompt, const EngineRequest& request,
    const std::vector<std::string>& stop, const ConstraintSpec& constraint,
    const std::function<void(const std::string&)>& on_text);

// Prefill of one chunk (after an optional prefix handle); the response as
// JSON (the proto's JSON mapping, as grpcurl prints it).
absl::StatusOr<std::string> RemotePrefill(const std::string& server, const PromptSpec& chunk,
                                          const std::string& prefix_handle, int32_t top_k, bool keep);

absl::StatusOr<EngineResult> RemoteScore(const std::string& server, const PromptSpec& prompt);

absl::StatusOr<std::vector<int32_t>> RemoteTokenize(const std::string& server, const std::string& text,
                                                    bool add_special_tokens);

}  // namespace shardlm
