#include "chat/fill_in_middle.h"

#include "absl/strings/str_cat.h"

namespace shardlm {
namespace {

// One family's tokens, by text. Suffix-first (SPM) families such as
// Codestral's are not listed: their prompt order differs.
struct FimFamily {
  const char* family;
  const char* prefix;
  const char* suffix;
  const char* middle;
  std::vector<const char*> ends;
};

const std::vector<FimFamily>& Families() {
  static const auto* families = new std::vector<FimFamily>{
      // Qwen2.5-Coder, Qwen3-Coder
      {"qwen",
       "<|fim_prefix|>",
       "<|fim_suffix|>",
       "<|fim_middle|>",
       {"<|fim_pad|>", "<|file_sep|>", "<|repo_name|>", "<|endoftext|>"}},
      // StarCoder 1/2
      {"starcoder",
       "<fim_prefix>",
       "<fim_suffix>",
       "<fim_middle>",
       {"<fim_pad>", "<file_sep>", "<|endoftext|>"}},
      // DeepSeek-Coder
      {"deepseek", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>", {"<|EOT|>"}},
      // CodeLlama
      {"codellama", "▁<PRE>", "▁<SUF>", "▁<MID>", {"▁<EOT>"}},
  };
  return *families;
}

}  // namespace

std::optional<FimTokens> FindFimTokens(const Tokenizer& tokenizer) {
  for (const FimFamily& f : Families()) {
    FimTokens t;
    t.prefix = tokenizer.AddedTokenId(f.prefix);
    t.suffix = tokenizer.AddedTokenId(f.suffix);
    t.middle = tokenizer.AddedTokenId(f.middle);
    if (t.prefix < 0 || t.suffix < 0 || t.middle < 0) continue;
    t.family = f.family;
    for (const char* end : f.ends) {
      if (const int32_t id = tokenizer.AddedTokenId(end); id >= 0) t.ends.push_back(id);
    }
    t.names = absl::StrCat(f.prefix, ", ", f.suffix, ", ", f.middle);
    return t;
  }
  return std::nullopt;
}

absl::StatusOr<std::vector<int32_t>> FimPrompt(const Tokenizer& tokenizer, const FimTokens& fim,
                                               const std::string& prefix, const std::string& suffix,
                                               int64_t max_tokens, const std::string& prefix_field,
                                               const std::string& suffix_field,
                                               const Tokenizer::StopCheck& stop) {
  // The BOS (or whatever the tokenizer adds around a text) when it adds one.
  auto ids = EncodeField(tokenizer, "", /*add_special_tokens=*/true, max_tokens, prefix_field, stop);
  if (!ids.ok()) return ids.status();
  std::vector<int32_t> out = std::move(*ids);
  auto pre = EncodeField(tokenizer, prefix, /*add_special_tokens=*/false, max_tokens, prefix_field, stop);
  if (!pre.ok()) return pre.status();
  auto suf = EncodeField(tokenizer, suffix, /*add_special_tokens=*/false, max_tokens, suffix_field, stop);
  if (!suf.ok()) return suf.status();
  out.push_back(fim.prefix);
  out.insert(out.end(), pre->begin(), pre->end());
  out.push_back(fim.suffix);
  out.insert(out.end(), suf->begin(), suf->end());
  out.push_back(fim.middle);
  return out;
}

}  // namespace shardlm
