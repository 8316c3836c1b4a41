// The text passes a tokenizer.json runs before BPE: Unicode normalization
// (ICU) and splitting by a pre-tokenizer's regex (PCRE2, with Unicode
// properties, as the Rust tokenizers' onig patterns need).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace shardlm {

// A compiled PCRE2 pattern (UTF, Unicode properties; JIT where it can).
struct SplitRegex;
// InvalidArgument naming `label` when `pattern` does not compile.
absl::StatusOr<std::shared_ptr<SplitRegex>> CompileRegex(const std::string& pattern,
                                                         const std::string& label);
// Splits `text` into pieces: the gaps between matches, and (unless
// `remove_matches`) the matches themselves.
void SplitByRegex(const SplitRegex& re, std::string_view text, bool remove_matches,
                  std::vector<std::string>* out);

enum class NormKind { kNfc, kNfkc };
absl::StatusOr<std::string> Normalize(NormKind kind, const std::string& text);

}  // namespace shardlm
