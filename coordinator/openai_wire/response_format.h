// OpenAI's response_format ({type: text | json_object | json_schema}) as a
// decoding constraint (docs/structured_outputs.md), for chat completions and
// the Assistants API's runs.
#pragma once

#include <string>

#include "constraints/constraint.h"
#include "coordinator/openai_wire/api_error.h"

namespace shardlm {
namespace openai {

// text: no constraint (kind kNone); json_object; json_schema with its schema.
// False with *error (naming the field and what it must be) for anything else.
bool ConstraintFromFormat(const Json& format, ConstraintSpec* out, std::string* error);

}  // namespace openai
}  // namespace shardlm
