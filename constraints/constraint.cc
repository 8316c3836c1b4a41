#include "constraints/constraint.h"

namespace shardlm {

std::string_view KindName(ConstraintSpec::Kind kind) {
  switch (kind) {
    case ConstraintSpec::Kind::kNone:
      return "none";
    case ConstraintSpec::Kind::kJsonSchema:
      return "json_schema";
    case ConstraintSpec::Kind::kJsonObject:
      return "json_object";
    case ConstraintSpec::Kind::kRegex:
      return "regex";
    case ConstraintSpec::Kind::kGrammar:
      return "grammar";
    case ConstraintSpec::Kind::kChoice:
      return "choice";
  }
  return "none";
}

nlohmann::json JsonLayoutOptions() {
  return {{"whitespace_flexible", false}, {"item_separator", ", "}, {"key_separator", ": "}};
}

}  // namespace shardlm
