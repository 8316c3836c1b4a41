// The checks of the stateful APIs' request bodies and list parameters
// (docs/stateful_apis.md sections 2 and 9). Each returns INVALID_ARGUMENT
// naming its parameter (BadParam), which the front end
// answers as a 400 with OpenAI's `param`.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/openai_wire/api_error.h"
#include "state/rows.h"

namespace shardlm {
namespace stateful {

using openai::Json;

inline constexpr int kMaxListLimit = 100;
inline constexpr int kMaxMetadataPairs = 16;
inline constexpr size_t kMaxMetadataKeyChars = 64;
inline constexpr size_t kMaxMetadataValueChars = 512;
inline constexpr size_t kMaxNameChars = 256;
inline constexpr size_t kMaxDescriptionChars = 512;
inline constexpr size_t kMaxInstructionsChars = 256000;
inline constexpr int kMaxTools = 128;
inline constexpr int kMaxThreadMessages = 32;     // messages in one thread create
inline constexpr int kMaxConversationItems = 20;  // items in one conversation create or items create

// INVALID_ARGUMENT with `message` as it is, naming `param` (OpenAI's `param`).
absl::Status BadParam(const std::string& param, const std::string& message);

// A status as OpenAI's error: a field it names becomes `param` (a 404 too: an unknown
// previous_response_id); an object that is not there (or is another key's) is a 404 of type
// invalid_request_error, as OpenAI answers it.
openai::ApiError ErrorOf(const absl::Status& status);

// A query string's parameters, percent-decoded; a key given twice is refused.
absl::StatusOr<std::map<std::string, std::string>> ParseQuery(const std::string& query);
// limit (1..100, default 20), order (asc | desc, default desc), after, before;
// any other key is refused unless in `also`.
absl::StatusOr<ListQuery> ListQueryOf(const std::map<std::string, std::string>& query,
                                      const std::set<std::string>& also = {});

// Every key of `body` is one of `known` (else the unknown one is named).
absl::Status OnlyKnown(const Json& body, const std::set<std::string>& known);
// metadata: an object of at most 16 string values, keys up to 64 characters,
// values up to 512; absent or null is {}. The JSON text.
absl::StatusOr<std::string> MetadataOf(const Json& body);
// A string of at most `max_chars` characters, or nothing when absent or null.
absl::StatusOr<std::optional<std::string>> OptionalText(const Json& body, const std::string& key,
                                                        size_t max_chars);
// A number in [lo, hi], or nothing when absent or null.
absl::StatusOr<std::optional<double>> OptionalNumber(const Json& body, const std::string& key, double lo,
                                                     double hi);
// tools: function tools only (file_search and code_interpreter are refused by
// name), at most 128. The JSON text of the list.
absl::StatusOr<std::string> ToolsOf(const Json& body);
// The body's `tools` when given (null when absent or null): a list of at most kMaxTools.
absl::StatusOr<const Json*> ToolList(const Json& body);
// A function's name (1 to 64 characters) and parameters (absent or a JSON Schema object), `f`
// being `where` in the body. Errors name `param`, or `where`.name and `where`.parameters when
// `param` is empty.
absl::Status CheckFunction(const Json& f, const std::string& where, const std::string& param = "");
// response_format: "auto" (nothing), or {type: text | json_object | json_schema{name, schema}}.
absl::StatusOr<std::optional<std::string>> ResponseFormatOf(const Json& body);
// A message's content, a string or a list of text parts, as stored: a JSON
// list of {type: "text", text: {value, annotations: []}}. `param` names it.
absl::StatusOr<std::string> ContentOf(const Json& content, const std::string& param);
// A parameter this server cannot honour, refused by name unless absent,
// null or empty (tool_resources, attachments).
absl::Status RefusedUnlessEmpty(const Json& body, const std::string& key, const std::string& why);

}  // namespace stateful
}  // namespace shardlm
