// Function tools for runs and responses (docs/stateful_apis.md section 7): the
// tools a request offers in chat's form, its tool_choice, the grammar a forced
// call decodes under, the reply split into content and calls in the chat
// template's own syntax (openai_wire/tool_calls.h), and the text a stream may
// show before the reply's end (what cannot start a call).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/openai_wire/api_error.h"
#include "coordinator/openai_wire/model_context.h"
#include "coordinator/openai_wire/tool_calls.h"
#include "coordinator/serving/generate_job.h"

namespace shardlm {
namespace stateful {

using openai::Json;

struct FunctionTools {
  Json chat_tools = Json::array();  // [{type: "function", function: {name, description, parameters}}]
  std::set<std::string> names;
  std::string forced;  // "": the model chooses ("auto"); "*": some call ("required"); else that function
  bool parallel = true;
  ToolFormat format = ToolFormat::kHermes;
  // Offered (and tool_choice is not "none"): the reply is parsed for calls.
  bool offered() const { return !names.empty(); }
};

// `tools` in chat's form (a run's) and `tool_choice` ("none", "auto", "required", or the named
// function: {type: function, function: {name}} for runs, {type: function, name} for responses).
// Errors name tool_choice.
absl::StatusOr<FunctionTools> FunctionToolsOf(const openai::ModelContext& model, const Json& tools,
                                              const Json& tool_choice, bool parallel);

// A checked tool_choice, as stored ("auto" when absent).
absl::StatusOr<Json> ToolChoiceOf(const Json& body);

// A forced call's grammar on `job`; INVALID_ARGUMENT naming tool_choice when a response format
// constrains it already.
absl::Status ConstrainCalls(const FunctionTools& tools, GenerateJob* job);

// A generation's reply as content and calls (only the first without parallel calls); a
// generation that did not end well keeps all its text as content (a call cut short is no call).
ParsedReply SplitReply(const FunctionTools& tools, const std::string& text, const absl::Status& ended);

// Whether a reply makes a message: it made no call, it has text, or some of it was shown.
bool MakesMessage(const ParsedReply& reply, bool shown);

// A reply's text as it streams: Take gives the text no call can start in that was not given
// yet; with no tools offered, all of it.
class StreamedText {
 public:
  explicit StreamedText(const FunctionTools& tools) : tools_(tools) {}
  std::string Take(const std::string& piece);

 private:
  const FunctionTools& tools_;
  std::string text_;
  size_t sent_ = 0;
};

}  // namespace stateful
}  // namespace shardlm
