#include "constraints/constraint_compiler.h"

#include <cstring>
#include <exception>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "llguidance.h"
#include "nlohmann/json.hpp"

namespace shardlm {
namespace {

// llguidance's tokenize_fn: the text's tokens by the project's BPE, no BOS/EOS. Called from any
// thread (Tokenizer::Encode is const and thread-safe). Writes at most `out_len` ids and returns
// how many there are in all, so that llguidance can call again with room for them. Nothing may
// unwind into Rust: an error (or an exception) is "no tokens".
size_t TokenizeFn(const void* user_data, const uint8_t* bytes, size_t len, uint32_t* out, size_t out_len) {
  try {
    const auto* tokenizer = static_cast<const Tokenizer*>(user_data);
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer->Encode(
        std::string(reinterpret_cast<const char*>(bytes), len), /*add_special_tokens=*/false);
    if (!ids.ok()) return 0;
    for (size_t i = 0; i < ids->size() && i < out_len; ++i) out[i] = static_cast<uint32_t>((*ids)[i]);
    return ids->size();
  } catch (...) {
    return 0;
  }
}

// The schema with JsonLayoutOptions() unless it sets llguidance's "x-guidance" options itself.
std::string WithJsonLayout(const std::string& schema_text) {
  // ordered_json: the properties keep the schema's order, which llguidance follows.
  nlohmann::ordered_json schema =
      nlohmann::ordered_json::parse(schema_text, nullptr, /*allow_exceptions=*/false);
  if (!schema.is_object() || schema.contains("x-guidance")) return schema_text;  // llguidance judges it
  schema["x-guidance"] = JsonLayoutOptions();
  return schema.dump();
}

// The Lark grammar of "exactly one of `choices`", each a JSON-escaped string literal.

absl::StatusOr<std::string> ChoiceGrammar(const std::vector<std::string>& choices) {
  if (choices.empty()) return absl::InvalidArgumentError("constraint.choice: the list of choices is empty");
  std::string grammar = "start: ";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) grammar += " | ";
    try {
      grammar += nlohmann::json(choices[i]).dump();
    } catch (const std::exception&) {
      return absl::InvalidArgumentError(absl::StrCat("constraint.choice: choice ", i, " is not valid UTF-8"));
    }
  }
  return grammar;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ConstraintCompiler>> ConstraintCompiler::Create(const Tokenizer& tokenizer,
                                                                               std::vector<int32_t> eos_ids) {
  const int32_t vocab = tokenizer.vocab_size();
  if (vocab <= 0) return absl::InvalidArgumentError("constraint: the tokenizer has no tokens");
  if (eos_ids.empty()) return absl::InvalidArgumentError("constraint: the model has no EOS token");
  for (int32_t id : eos_ids) {
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("constraint: EOS token ", id, " is outside the tokenizer's vocabulary of ", vocab));
    }
  }
  // Every token's bytes, concatenated. Special tokens (and the EOS tokens, special or not) get
  // llguidance's 0xFF marker in front, as llguidance's own tokenizer.json reader does: they then
  // never match text, and EOS is allowed only where the constraint can end.
  std::vector<uint32_t> lens(vocab);
  std::string all_bytes;
  for (int32_t id = 0; id < vocab; ++id) {
    const std::string& bytes = tokenizer.TokenBytes(id, /*skip_special=*/false);
    bool special = tokenizer.IsSpecial(id);
    for (int32_t eos : eos_ids) special = special || eos == id;
    if (special && !bytes.empty()) all_bytes.push_back('\xFF');
    all_bytes += bytes;
    lens[id] = static_cast<uint32_t>(bytes.size() + (special && !bytes.empty() ? 1 : 0));
  }
  std::vector<uint32_t> eos_extra;
  for (size_t i = 1; i < eos_ids.size(); ++i) eos_extra.push_back(static_cast<uint32_t>(eos_ids[i]));

  LlgTokenizerInitV2 init;
  std::memset(&init, 0, sizeof(init));
  init.struct_size = sizeof(init);
  init.vocab_size = static_cast<uint32_t>(vocab);
  init.tok_eos = static_cast<uint32_t>(eos_ids[0]);
  init.token_lens = lens.data();
  init.token_bytes = reinterpret_cast<const uint8_t*>(all_bytes.data());
  init.tokenize_assumes_string = true;  // Encode refuses invalid UTF-8
  init.tokenize_fn = &TokenizeFn;
  init.tokenize_user_data = &tokenizer;
  init.tok_eos_extra = eos_extra.empty() ? nullptr : eos_extra.data();
  init.tok_eos_extra_count = static_cast<uint32_t>(eos_extra.size());

  std::unique_ptr<ConstraintCompiler> compiler(new ConstraintCompiler(vocab, eos_ids));
  char error[1024] = {0};
  compiler->llg_tokenizer_ = llg_new_tokenizer_v2(&init, error, sizeof(error));
  if (compiler->llg_tokenizer_ == nullptr) {
    return absl::InternalError(absl::StrCat("constraint: llguidance refused the tokenizer: ", error));
  }
  return compiler;
}

ConstraintCompiler::~ConstraintCompiler() { llg_free_tokenizer(llg_tokenizer_); }

absl::StatusOr<std::unique_ptr<Matcher>> ConstraintCompiler::Compile(const ConstraintSpec& spec) const {
  const std::string field = "constraint." + std::string(KindName(spec.kind));
  const char* type = nullptr;
  std::string data = spec.text;
  switch (spec.kind) {
    case ConstraintSpec::Kind::kNone:
      return absl::InvalidArgumentError("constraint: no constraint given");
    case ConstraintSpec::Kind::kJsonSchema:
      type = "json_schema";
      data = WithJsonLayout(spec.text);
      break;
    case ConstraintSpec::Kind::kJsonObject:
      type = "json_schema";  // any JSON object, laid out as above
      data = WithJsonLayout(R"({"type": "object"})");
      break;
    case ConstraintSpec::Kind::kRegex:
      type = "regex";
      break;
    case ConstraintSpec::Kind::kGrammar:
      type = "lark";
      break;
    case ConstraintSpec::Kind::kChoice: {
      type = "lark";
      absl::StatusOr<std::string> grammar = ChoiceGrammar(spec.choices);
      if (!grammar.ok()) return grammar.status();
      data = *std::move(grammar);
      break;
    }
  }
  if (data.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": contains a NUL byte"));
  }

  LlgConstraintInit init;
  std::memset(&init, 0, sizeof(init));
  llg_constraint_init_set_defaults(&init, llg_tokenizer_);
  init.log_stderr_level = 0;
  init.log_buffer_level = 0;
  // Errors without the parser's state and the whole grammar: they go back to clients.
  init.limits.verbose_errors = false;
  LlgMatcher* m = llg_new_matcher(&init, type, data.c_str());
  if (llg_matcher_get_error(m) != nullptr) {
    absl::Status status = absl::InvalidArgumentError(absl::StrCat(field, ": ", LlgErrorMessage(m)));
    llg_free_matcher(m);
    return status;
  }
  return std::make_unique<Matcher>(m, vocab_size_, eos_ids_);
}

}  // namespace shardlm
