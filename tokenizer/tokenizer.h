// Byte-level BPE tokenizer read from a Hugging Face tokenizer.json (Llama-3,
// Qwen2/3, GPT-2, Mistral-Nemo style).
//
// Encode pipeline, as the file declares it:
//   1. added / special tokens are cut out of the raw text first;
//   2. normalizer (none, NFC, NFKC, or a Sequence of them);
//   3. pre-tokenizer: Split(regex, Isolated|Removed) and/or ByteLevel
//      (bytes -> printable code points; optional GPT-2 regex);
//   4. BPE by merge rank (honouring ignore_merges);
//   5. post-processor TemplateProcessing adds BOS/EOS when asked.
// Decode maps ids back to bytes; see IncrementalDetokenizer for streaming.
//
//   SHARDLM_ASSIGN_OR_RETURN(auto tok, Tokenizer::Load(dir + "/tokenizer.json"));
//   SHARDLM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok->Encode("Hello", false));
//   std::string text = tok->Decode(ids, /*skip_special=*/true);
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shardlm {

class Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& tokenizer_json_path);
  // The tokenizer of a model (a checkpoint directory's tokenizer.json, or a GGUF
  // file's metadata); NotFound when the model has none.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> ForModel(const std::string& model);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(const std::string& json_text,
                                                             const std::string& label);
  virtual ~Tokenizer() = default;

  // Asked while a long text is encoded (between pieces, and every few
  // thousand merges inside one): true stops it with CANCELLED. A request's
  // handler passes "the client left or the deadline passed".
  using StopCheck = std::function<bool()>;

  // InvalidArgument when `text` is not valid UTF-8. Time O(n log n) in the
  // longest unbroken piece of the text.
  absl::StatusOr<std::vector<int32_t>> Encode(const std::string& text, bool add_special_tokens) const {
    return Encode(text, add_special_tokens, StopCheck());
  }
  virtual absl::StatusOr<std::vector<int32_t>> Encode(const std::string& text, bool add_special_tokens,
                                                      const StopCheck& stop) const = 0;
  // The most bytes of text one token stands for: a text of n bytes is at
  // least about n / MaxTokenBytes() tokens (CheckTextFits).
  virtual int64_t MaxTokenBytes() const = 0;
  // Lossy UTF-8 (U+FFFD for invalid bytes) of the ids' bytes.
  virtual std::string Decode(const std::vector<int32_t>& ids, bool skip_special) const = 0;
  // The raw bytes a token stands for ("" for out-of-range ids and, when
  // skip_special, for special tokens).
  virtual const std::string& TokenBytes(int32_t id, bool skip_special) const = 0;
  virtual bool IsSpecial(int32_t id) const = 0;
  // One past the largest id.
  virtual int32_t vocab_size() const = 0;
  // Id of an added token by content, or -1.
  virtual int32_t AddedTokenId(const std::string& content) const = 0;
};

// Refuses, before tokenizing, a text too long to fit `max_tokens` tokens (the
// model's context) however it tokenizes: more than max_tokens x MaxTokenBytes()
// x 4 bytes. The 4 allows for normalization shrinking a text (NFC composing a
// Hangul syllable from three jamo takes 9 bytes to 3). InvalidArgument naming
// `field`, the size and the limit.
absl::Status CheckTextFits(const Tokenizer& tokenizer, size_t text_bytes, int64_t max_tokens,
                           const std::string& field);

// A request's text as tokens: CheckTextFits against `max_tokens`, then Encode with
// `stop`. Every error names `field` (InvalidArgument, or CANCELLED when stopped).
// The one way the front ends (gRPC and the OpenAI HTTP API) tokenize client text.
absl::StatusOr<std::vector<int32_t>> EncodeField(const Tokenizer& tokenizer, const std::string& text,
                                                 bool add_special_tokens, int64_t max_tokens,
                                                 const std::string& field, const Tokenizer::StopCheck& stop);

}  // namespace shardlm
