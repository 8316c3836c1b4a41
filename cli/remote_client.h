// The client side of shardlm.v1.Inference, for the CLI's --server mode.
// Results come back in the same shapes the in-process engine produces, so the
// commands print them the same way.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/engine.h"

namespace shardlm {

struct PromptSpec {
  bool is_text = false;
  std::string text;
  std::vector<int32_t> ids;
};

// Streams a generation; `on_text` gets each text delta as it arrives.
// Returns the result and the whole text.
absl::StatusOr<std::pair<GenerateResult, std::string>> RemoteGenerate(
    const std::string& server, const PromptSpec& prompt, const GenerateRequest& request,
    const std::function<void(const std::string&)>& on_text);

absl::StatusOr<GenerateResult> RemoteScore(const std::string& server, const PromptSpec& prompt);

absl::StatusOr<std::vector<int32_t>> RemoteTokenize(const std::string& server, const std::string& text,
                                                    bool add_special_tokens);

}  // namespace shardlm
