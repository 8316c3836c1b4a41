// Constrained decoding from the command line and from batch lines
// (docs/structured_outputs.md): the same five kinds as the gRPC Constraint.
//
//   shardlm generate --model m.gguf --prompt "..." --json-schema person.json
//   shardlm generate --model m.gguf --prompt "..." --regex '[0-9]{3}-[0-9]{4}'
//   {"prompt": "...", "json_schema": {"type": "object"}}          (a batch line)
//
// In-process, the spec is compiled against the model's own tokenizer
// (ConstraintCompiler, built once per model); with --server it travels as
// shardlm.v1.GenerateRequest.constraint and the server compiles it.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "cli/flags.h"
#include "constraints/constraint.h"
#include "constraints/matcher.h"

namespace shardlm {

struct LocalModel;

// --json-schema FILE, --json-object, --regex RE, --grammar FILE, --choice LIST.
struct ConstraintFlags {
  std::optional<std::string> json_schema;  // a file
  bool json_object = false;
  std::optional<std::string> regex;
  std::optional<std::string> grammar;  // a file
  std::optional<std::string> choice;
};
void AddConstraintFlags(FlagSet& f, ConstraintFlags* out);

// The constraint the flags ask for (kind kNone when none); at most one of them.
// InvalidArgument naming the flag: two given, a file that cannot be read, a
// schema that is not JSON, an empty choice list.
absl::StatusOr<ConstraintSpec> ConstraintFromFlags(const ConstraintFlags& f);

// The spec compiled for `model` (its tokenizer and EOS tokens); null for kNone.
// Errors name `field` ("--regex", "line 3: regex") and quote llguidance.
absl::StatusOr<std::shared_ptr<const Matcher>> CompileForModel(LocalModel& model, const ConstraintSpec& spec,
                                                               const std::string& field);

// The flag (or batch key) a kind is given by: "--json-schema", ...
std::string ConstraintFlag(ConstraintSpec::Kind kind);

}  // namespace shardlm
