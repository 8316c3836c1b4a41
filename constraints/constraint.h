// A request's constraint on what it may generate (docs/structured_outputs.md): a JSON schema, any
// JSON object, a regular expression, a Lark grammar, or one of a list of strings. The front ends
// fill it from the API; ConstraintCompiler (constraint_compiler.h) turns it into a Matcher.
#pragma once

#include <string>
#include <string_view>
#include <vector>

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

// The API's field name of a kind ("json_schema", "json_object", "regex", "grammar", "choice";
// "none" for kNone): errors name "constraint." + KindName(kind).
std::string_view KindName(ConstraintSpec::Kind kind);

}  // namespace shardlm
