// The byte-level BPE tokenizer behind Tokenizer (tokenizer.h), shared by its
// two halves: tokenizer_json.cc reads tokenizer.json (model, normalizer,
// pre-tokenizer, post-processor, added tokens) and tokenizer.cc encodes and
// decodes. Nothing else includes it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "nlohmann/json.hpp"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace shardlm::bpe {

using json = nlohmann::json;

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
};

// One normalizer: NFC or NFKC (ICU), or a literal Replace, or a Prepend to
// non-empty text (the SentencePiece-style tokenizers' U+2581).
struct NormStep {
  enum Kind { kUnicode, kReplace, kPrepend } kind = kUnicode;
  NormKind unicode = NormKind::kNfc;
  std::string pattern, content;
};

struct PreTokStep {
  enum Kind { kSplit, kByteLevel } kind;
  std::shared_ptr<SplitRegex> regex;  // kSplit, or kByteLevel with use_regex
  bool remove_matches = false;
  bool add_prefix_space = false;
};

// (a, b) as the merges table's key.
inline uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

class BpeTokenizer final : public Tokenizer {
 public:
  absl::Status Init(const json& root, const std::string& label);

  using Tokenizer::Encode;
  absl::StatusOr<std::vector<int32_t>> Encode(const std::string& text, bool add_special,
                                              const StopCheck& stop) const override;
  int64_t MaxTokenBytes() const override { return max_token_bytes_; }
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special) const override;
  const std::string& TokenBytes(int32_t id, bool skip_special) const override;
  bool IsSpecial(int32_t id) const override { return special_ids_.count(id) > 0; }
  int32_t vocab_size() const override { return static_cast<int32_t>(token_bytes_.size()); }
  int32_t AddedTokenId(const std::string& content) const override {
    for (const AddedToken& t : added_) {
      if (t.content == content) return t.id;
    }
    return -1;
  }

 private:
  absl::Status InitModel(const json& model, const std::string& label);
  absl::Status InitPreTokenizer(const json& node, const std::string& label);
  absl::Status InitNormalizer(const json& node, const std::string& label);
  absl::Status InitPostProcessor(const json& node, const std::string& label);
  // Encodes text that holds no added tokens.
  absl::Status EncodeOrdinary(const std::string& text, std::vector<int32_t>* ids,
                              const StopCheck& stop) const;
  absl::Status Bpe(const std::string& spelled, std::vector<int32_t>* ids, const StopCheck& stop) const;
  // Applies the merges to `syms` (one id per code point) in rank order;
  // Cancelled when `stop` says so (asked every kMergesPerStopCheck merges).
  absl::Status MergeSymbols(std::vector<int32_t>& syms, const StopCheck& stop) const;

  std::unordered_map<std::string, int32_t> vocab_;                    // byte-level spelling -> id
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (a, b) -> (rank, merged id)
  bool ignore_merges_ = false;
  int64_t max_token_bytes_ = 1;           // the longest token's raw bytes
  std::vector<std::string> token_bytes_;  // id -> raw bytes
  std::vector<AddedToken> added_;
  std::unordered_map<unsigned char, std::vector<size_t>> added_by_first_byte_;  // longest first
  std::unordered_set<int32_t> special_ids_;
  std::vector<NormStep> normalizers_;
  // SentencePiece-style vocabularies (model.byte_fallback): a code point not in
  // the vocabulary becomes the <0xXX> tokens of its UTF-8 bytes.
  bool byte_fallback_ = false;
  int32_t byte_tokens_[256] = {};
  std::vector<PreTokStep> pretok_;
  std::vector<int32_t> prefix_ids_, suffix_ids_;  // TemplateProcessing "single"
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace shardlm::bpe
