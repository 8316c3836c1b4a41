#include "coordinator/stateful/response_request.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/random_token.h"
#include "common/status.h"
#include "coordinator/openai_wire/response_format.h"
#include "coordinator/stateful/function_tools.h"
#include "coordinator/stateful/response_items.h"
#include "coordinator/stateful/stateful_params.h"

namespace shardlm {
namespace stateful {
namespace {

const std::set<std::string> kKeys = {"model",
                                     "input",
                                     "instructions",
                                     "previous_response_id",
                                     "store",
                                     "stream",
                                     "stream_options",
                                     "temperature",
                                     "top_p",
                                     "max_output_tokens",
                                     "text",
                                     "tools",
                                     "tool_choice",
                                     "parallel_tool_calls",
                                     "truncation",
                                     "metadata",
                                     "user",
                                     "background",
                                     "conversation",
                                     "include",
                                     "reasoning",
                                     "prompt",
                                     "top_logprobs",
                                     "service_tier",
                                     "prompt_cache_key",
                                     "safety_identifier",
                                     "max_tool_calls"};

absl::Status InputInto(const Json& body, ResponseRequest* r) {
  if (!body.contains("input")) return BadParam("input", "input is required (a string or a list of items)");
  const Json& input = body["input"];
  if (input.is_string()) {
    SHARDLM_ASSIGN_OR_RETURN(Json item, InputItem(Json{{"role", "user"}, {"content", input}}, "input"));
    r->input.push_back(std::move(item));
    return absl::OkStatus();
  }
  if (!input.is_array() || input.empty())
    return BadParam("input", "input must be a string or a non-empty list of items");
  for (size_t i = 0; i < input.size(); ++i) {
    SHARDLM_ASSIGN_OR_RETURN(Json item, InputItem(input[i], absl::StrCat("input[", i, "]")));
    r->input.push_back(std::move(item));
  }
  return absl::OkStatus();
}

// text: {format: {type: text | json_object | json_schema, name, schema, strict}} (the format is flat here).
absl::Status TextInto(const Json& body, ResponseRequest* r) {
  r->config["text"] = Json{{"format", {{"type", "text"}}}};
  if (!body.contains("text") || body["text"].is_null()) return absl::OkStatus();
  const Json& text = body["text"];
  if (!text.is_object()) return BadParam("text", "text must be an object");
  if (!text.contains("format")) return absl::OkStatus();
  const Json& f = text["format"];
  Json as_response_format = f;
  if (f.is_object() && f.contains("type") && f["type"] == "json_schema") {
    as_response_format =
        Json{{"type", "json_schema"},
             {"json_schema", {{"name", f.contains("name") && f["name"].is_string() ? f["name"] : Json("")}}}};
    if (f.contains("schema")) as_response_format["json_schema"]["schema"] = f["schema"];
  }
  ConstraintSpec unused;
  std::string error;
  if (!openai::ConstraintFromFormat(as_response_format, &unused, &error)) {
    return BadParam("text.format",
                    "text.format must be {type: text}, {type: json_object} or {type: json_schema, "
                    "name, schema}");
  }
  r->settings.format = as_response_format;
  r->settings.format_param = "text.format";
  r->config["text"] = Json{{"format", f}};
  return absl::OkStatus();
}

// conversation: "conv_..." or {"id": "conv_..."}.
absl::StatusOr<std::optional<std::string>> ConversationOf(const Json& body) {
  if (!body.contains("conversation") || body["conversation"].is_null()) return std::nullopt;
  const Json& c = body["conversation"];
  const Json id = c.is_object() && c.contains("id") ? c["id"] : c;
  if (!id.is_string() || id.get<std::string>().empty() || id.get<std::string>().size() > 128) {
    return BadParam("conversation",
                    "conversation must be a conversation id or {\"id\": ...} (a string of at most 128 "
                    "characters)");
  }
  return id.get<std::string>();
}

absl::Status RefusedFields(const Json& body) {
  auto given = [&](const char* key) {
    return body.contains(key) && !body[key].is_null() && !(body[key].is_structured() && body[key].empty()) &&
           body[key] != false && body[key] != 0;
  };
  if (given("include")) return BadParam("include", "include is not supported by this server");
  if (given("reasoning")) return BadParam("reasoning", "the model does not reason");
  if (given("prompt")) return BadParam("prompt", "stored prompts are not supported by this server");
  if (given("top_logprobs"))
    return BadParam("top_logprobs", "top_logprobs is not supported yet by the Responses API");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ResponseRequest> ParseResponseRequest(const Json& body,
                                                     const std::vector<std::string>& model_names) {
  ResponseRequest r;
  SHARDLM_RETURN_IF_ERROR(OnlyKnown(body, kKeys));
  SHARDLM_RETURN_IF_ERROR(RefusedFields(body));
  if (!body.contains("model") || !body["model"].is_string())
    return BadParam("model", "model is required (a string)");
  r.model = body["model"].get<std::string>();
  if (std::find(model_names.begin(), model_names.end(), r.model) == model_names.end()) {
    return BadParam(
        "model", absl::StrCat("The model '", r.model.substr(0, 128), "' does not exist; this server serves '",
                              absl::StrJoin(model_names, "', '"), "'"));
  }
  SHARDLM_ASSIGN_OR_RETURN(std::optional<std::string> instructions,
                           OptionalText(body, "instructions", kMaxInstructionsChars));
  r.instructions = instructions.value_or("");
  SHARDLM_RETURN_IF_ERROR(InputInto(body, &r));
  SHARDLM_ASSIGN_OR_RETURN(r.previous_response_id, OptionalText(body, "previous_response_id", 128));
  SHARDLM_ASSIGN_OR_RETURN(r.conversation_id, ConversationOf(body));
  if (r.conversation_id && r.previous_response_id) {
    return BadParam("conversation",
                    "Mutually exclusive parameters: Ensure you are only providing one of: "
                    "'previous_response_id' or 'conversation'.");
  }
  for (const char* key : {"store", "stream", "background", "parallel_tool_calls"}) {
    if (body.contains(key) && !body[key].is_null() && !body[key].is_boolean()) {
      return BadParam(key, absl::StrCat(key, " must be true or false"));
    }
  }
  r.store = body.contains("store") && body["store"].is_boolean() ? body["store"].get<bool>() : true;
  r.stream = body.contains("stream") && body["stream"].is_boolean() && body["stream"].get<bool>();
  r.background =
      body.contains("background") && body["background"].is_boolean() && body["background"].get<bool>();
  if (r.background && !r.store)
    return BadParam("background", "a background response must be stored: send store: true");
  if (r.conversation_id && !r.store)
    return BadParam("store", "store must be true with a conversation: the conversation keeps this turn");
  if (r.background && r.stream) {
    return BadParam("stream", "streaming a background response is not supported yet by this server: poll it");
  }
  SHARDLM_ASSIGN_OR_RETURN(r.settings.temperature, OptionalNumber(body, "temperature", 0, 2));
  SHARDLM_ASSIGN_OR_RETURN(r.settings.top_p, OptionalNumber(body, "top_p", 0, 1));
  if (body.contains("max_output_tokens") && !body["max_output_tokens"].is_null()) {
    if (!body["max_output_tokens"].is_number_integer() || body["max_output_tokens"].get<int64_t>() < 1) {
      return BadParam("max_output_tokens", "max_output_tokens must be an integer of at least 1");
    }
    r.settings.max_tokens = body["max_output_tokens"].get<int64_t>();
  }
  const std::string truncation = body.contains("truncation") && body["truncation"].is_string()
                                     ? body["truncation"].get<std::string>()
                                     : "disabled";
  if (truncation != "auto" && truncation != "disabled")
    return BadParam("truncation", "truncation must be \"auto\" or \"disabled\"");
  r.truncation_auto = truncation == "auto";
  SHARDLM_RETURN_IF_ERROR(TextInto(body, &r));
  Json echoed_tools;
  SHARDLM_ASSIGN_OR_RETURN(r.chat_tools, ResponseToolsOf(body, &echoed_tools));
  SHARDLM_ASSIGN_OR_RETURN(r.tool_choice, ToolChoiceOf(body));
  SHARDLM_ASSIGN_OR_RETURN(std::string metadata, MetadataOf(body));
  Json& c = r.config;
  c["model"] = r.model;
  c["instructions"] = instructions ? Json(*instructions) : Json();
  c["temperature"] = r.settings.temperature.value_or(1.0);
  c["top_p"] = r.settings.top_p.value_or(1.0);
  c["max_output_tokens"] = r.settings.max_tokens ? Json(*r.settings.max_tokens) : Json();
  c["truncation"] = truncation;
  c["metadata"] = Json::parse(metadata);
  c["store"] = r.store;
  c["background"] = r.background;
  c["parallel_tool_calls"] = body.contains("parallel_tool_calls") && body["parallel_tool_calls"].is_boolean()
                                 ? body["parallel_tool_calls"]
                                 : Json(true);
  c["user"] = body.contains("user") && body["user"].is_string() ? body["user"] : Json();
  c["tools"] = std::move(echoed_tools);
  c["tool_choice"] = r.tool_choice;
  return r;
}

}  // namespace stateful
}  // namespace shardlm
