// Compiles requests' constraints into llguidance matchers (docs/structured_outputs.md). Built once
// per model, at load: it gives llguidance the model's vocabulary (every token's bytes) and its
// EOS tokens, and a tokenize function over the project's own BPE. Compile is then called once
// per constrained request (per sample), at admission, so that a bad constraint is refused as
// INVALID_ARGUMENT naming its field before anything is queued.
//
//   SHARDLM_ASSIGN_OR_RETURN(auto compiler, ConstraintCompiler::Create(*tokenizer, eos_ids));
//   SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<Matcher> m, compiler->Compile(spec));
//
// The tokenizer must outlive the compiler, and the compiler every Matcher it made. Compile is
// const and thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "constraints/constraint.h"
#include "constraints/matcher.h"
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer.h"

struct LlgTokenizer;  // llguidance.h

namespace shardlm {

class ConstraintCompiler {
 public:
  // `eos_ids`: the tokens that end a sequence (the first is llguidance's main EOS); a stopped
  // matcher allows exactly these. InvalidArgument when there is none or one is out of range.
  static absl::StatusOr<std::unique_ptr<ConstraintCompiler>> Create(const Tokenizer& tokenizer,
                                                                    std::vector<int32_t> eos_ids);
  ~ConstraintCompiler();
  ConstraintCompiler(const ConstraintCompiler&) = delete;
  ConstraintCompiler& operator=(const ConstraintCompiler&) = delete;

  // A fresh matcher for `spec`. InvalidArgument "constraint.<kind>: <llguidance's message>" for
  // an invalid schema, unsupported keyword, regex or grammar, or an empty choice list.
  absl::StatusOr<std::unique_ptr<Matcher>> Compile(const ConstraintSpec& spec) const;

  // The tokenizer's vocabulary: the masks cover ids [0, vocab_size()).
  int64_t vocab_size() const { return vocab_size_; }

 private:
  ConstraintCompiler(int32_t vocab_size, std::vector<int32_t> eos_ids)
      : vocab_size_(vocab_size), eos_ids_(std::move(eos_ids)) {}

  int32_t vocab_size_;
  std::vector<int32_t> eos_ids_;
  LlgTokenizer* llg_tokenizer_ = nullptr;  // calls back into the Tokenizer given to Create
};

}  // namespace shardlm
