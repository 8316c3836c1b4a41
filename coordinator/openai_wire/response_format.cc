#include "coordinator/openai_wire/response_format.h"

namespace shardlm {
namespace openai {

bool ConstraintFromFormat(const Json& f, ConstraintSpec* out, std::string* error) {
  const std::string type =
      f.is_object() && f.contains("type") && f["type"].is_string() ? f["type"].get<std::string>() : "";
  if (type == "text") {
    *out = ConstraintSpec();
  } else if (type == "json_object") {
    *out = ConstraintSpec();
    out->kind = ConstraintSpec::Kind::kJsonObject;
  } else if (type == "json_schema") {
    if (!f.contains("json_schema") || !f["json_schema"].is_object() || !f["json_schema"].contains("schema") ||
        !(f["json_schema"]["schema"].is_object() || f["json_schema"]["schema"].is_boolean())) {
      *error = "response_format.json_schema.schema is required (a JSON Schema object) with type json_schema";
      return false;
    }
    *out = {ConstraintSpec::Kind::kJsonSchema, f["json_schema"]["schema"].dump(), {}};
  } else {
    *error = "response_format.type must be \"text\", \"json_object\" or \"json_schema\"";
    return false;
  }
  return true;
}

}  // namespace openai
}  // namespace shardlm
