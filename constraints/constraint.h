// A request's constraint on what it may generate (docs/structured_outputs.md): a JSON schema, any
// JSON object, a regular expression, a Lark grammar, or one of a list of strings. The front ends
// fill it from the API; ConstraintCompiler (constraint_compiler.h) turns it into a Matcher.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"

namespace shardlm {

struct ConstraintSpec {
  enum class Kind { kNone, kJsonSchema, kJsonObject, kRegex, kGrammar, kChoice };
  Kind kind = Kind::kNone;
  // kJsonSchema: the schema's JSON text; kRegex: the regular expression (Rust regex syntax);
  // kGrammar: a Lark grammar (llguidance's variant). Unused by kJsonObject and kChoice.
  std::string text;
  // kChoice: the strings the output may be, exactly one of them.
  std::vector<std::string> choices;

  bool empty() const { return kind == Kind::kNone; }
};

// llguidance's "x-guidance" options for JSON laid out as Python's json.dumps lays it out
// (", " and ": ", no other whitespace). ConstraintCompiler::Compile gives them to every JSON constraint whose
// schema does not set its own; a grammar's %json needs them in its schema. llguidance's
// default allows any run of whitespace between tokens, and a small model then pads a
// document with newlines until max_tokens (vLLM's disable_any_whitespace, on by default here).
nlohmann::json JsonLayoutOptions();

// The API's field name of a kind ("json_schema", "json_object", "regex", "grammar", "choice";
// "none" for kNone): errors name "constraint." + KindName(kind).
std::string_view KindName(ConstraintSpec::Kind kind);

}  // namespace shardlm
