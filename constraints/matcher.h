// One constrained sequence's llguidance matcher (docs/structured_outputs.md): the mask of tokens
// allowed next, and the tokens generated so far fed back into it. Made by ConstraintCompiler;
// the compiler (and its tokenizer) must outlive every Matcher it makes. Not thread-safe: one
// thread at a time per Matcher; distinct Matchers may run on distinct threads.
//
//   std::vector<uint32_t> mask;
//   SHARDLM_RETURN_IF_ERROR(matcher->ComputeMask(mask));  // bit t of mask[t / 32]: t allowed
//   ... sample a token t from the allowed ones ...
//   SHARDLM_RETURN_IF_ERROR(matcher->Consume(t));
//   if (matcher->stopped()) ...  // the constraint's own end (it then allows only EOS)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"

struct LlgMatcher;  // llguidance.h

namespace shardlm {

class Matcher {
 public:
  // Takes ownership of `matcher` (a matcher of a tokenizer of `vocab_size` tokens whose EOS
  // tokens are `eos_ids`).
  Matcher(LlgMatcher* matcher, int32_t vocab_size, std::vector<int32_t> eos_ids);
  ~Matcher();
  Matcher(Matcher&& other) noexcept;
  Matcher& operator=(Matcher&& other) noexcept;
  Matcher(const Matcher&) = delete;
  Matcher& operator=(const Matcher&) = delete;

  // The tokens allowed next, as mask_words() 32-bit words: bit i % 32 of word i / 32 set means
  // token i is allowed. Resizes `mask`. Once stopped, only the EOS tokens are allowed.
  // InternalError quoting llguidance when the matcher failed (e.g. after a refused Consume).
  absl::Status ComputeMask(std::vector<uint32_t>& mask);
  // Feeds a generated token. InvalidArgument, quoting llguidance, for a token the constraint
  // does not allow (the matcher is then failed for good) or out of the vocabulary. An EOS token
  // after the constraint ended (stopped(), not failed()) is accepted and changes nothing:
  // llguidance itself refuses every token once stopped, though its mask then allows EOS; any
  // other token then is InvalidArgument (and leaves the matcher as it was).
  absl::Status Consume(int32_t token);
  // The constraint has ended: completed (an EOS consumed, or, as soon as the last token that can
  // be added was consumed, before any EOS: llguidance stops a matcher that cannot be extended),
  // or failed.
  bool stopped() const;
  // Failed: a refused token or an internal error; stopped() is then true as well.
  bool failed() const;
  // What was consumed so far is a complete match (EOS would be allowed now).
  bool accepting();
  // An independent copy in the same state (n > 1 samples, handles).
  std::unique_ptr<Matcher> Clone() const;
  int64_t mask_words() const;

 private:
  LlgMatcher* m_ = nullptr;
  int32_t vocab_size_ = 0;
  std::vector<int32_t> eos_ids_;
};

// llguidance's error message of `matcher` (llg_matcher_get_error), trimmed; "unknown llguidance
// error" when it has none.
std::string LlgErrorMessage(LlgMatcher* matcher);

}  // namespace shardlm
