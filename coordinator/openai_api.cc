#include "coordinator/openai_api.h"

#include <cmath>
#include <optional>
#include <set>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "chat/chat_template.h"
#include "common/grpc_status.h"
#include "coordinator/request_limits.h"
#include "model/sampling_limits.h"
#include "tokenizer/utf8.h"

namespace shardlm {
namespace openai {
namespace {

namespace pb = ::shardlm::v1;

constexpr int kMaxLogitBias = kMaxLogitBiasEntries;

// A client's value as an error message shows it: scalars as JSON (cut
// short), lists and objects by kind only.
std::string Shown(const Json& v) {
  if (v.is_structured()) return v.is_array() ? "a list" : "an object";
  std::string text = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 64) text = text.substr(0, 61) + "...";
  return text;
}

// Checks a body's parameters; the first error wins and names its parameter.
class Params {
 public:
  Params(const Json& body, ApiError* error, const Tokenizer::StopCheck& stop)
      : body_(body), error_(error), stop_(stop) {}

  // Tokenizes `text` (the value of `field`): refused before tokenizing when it is
  // longer than the context could hold; stops when the client has gone.
  std::optional<std::vector<int32_t>> Encode(const std::string& field, const std::string& text,
                                             const ModelContext& model, bool add_special_tokens) {
    auto ids = EncodeField(*model.tokenizer, text, add_special_tokens, model.max_context, field, stop_);
    if (!ids.ok()) {
      Fail(field, std::string(ids.status().message()));
      return std::nullopt;
    }
    return std::move(*ids);
  }

  bool Fail(const std::string& param, const std::string& message) {
    if (!failed_) {
      failed_ = true;
      *error_ = ApiError{400, message, "invalid_request_error", param, ""};
    }
    return false;
  }
  bool failed() const { return failed_; }
  void SetStatus(int http_status, const std::string& code) {
    error_->http_status = http_status;
    error_->code = code;
  }
  // A parameter given and not null.
  bool Has(const std::string& key) const { return body_.contains(key) && !body_.at(key).is_null(); }
  const Json& At(const std::string& key) const { return body_.at(key); }

  // The value when given and in range; nullopt when absent or after Fail.
  std::optional<float> Number(const std::string& key, double min, double max, bool min_open) {
    if (!Has(key)) return std::nullopt;
    const Json& v = At(key);
    if (!v.is_number()) {
      Fail(key, absl::StrCat(key, " must be a number, got ", Shown(v)));
      return std::nullopt;
    }
    const double d = v.get<double>();
    if (!std::isfinite(d) || (min_open ? d <= min : d < min) || d > max) {
      Fail(key, absl::StrCat(key, " must be in ", min_open ? "(" : "[", min, ", ", max, "], got ", d));
      return std::nullopt;
    }
    return static_cast<float>(d);
  }
  std::optional<float> Bounded(const std::string& key, const SamplingBound& b) {
    return Number(key, b.lo, b.hi, b.lo_open);
  }
  bool Integer(const std::string& key, int64_t min, int64_t max, int64_t* out) {
    if (!Has(key)) return true;
    const Json& v = At(key);
    // 16.0 is 16, as Python clients may send it.
    const bool integral_float = v.is_number_float() && std::isfinite(v.get<double>()) &&
                                std::floor(v.get<double>()) == v.get<double>() &&
                                std::fabs(v.get<double>()) < 9e15;
    if (!v.is_number_integer() && !integral_float)
      return Fail(key, absl::StrCat(key, " must be an integer, got ", Shown(v)));
    // Large unsigned values do not fit int64: they are past any limit here.
    const int64_t i = integral_float ? static_cast<int64_t>(v.get<double>())
                      : v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                          ? INT64_MAX
                          : v.get<int64_t>();
    if (i < min || i > max)
      return Fail(key, absl::StrCat(key, " must be in [", min, ", ", max, "], got ", i));
    *out = i;
    return true;
  }
  bool Bool(const std::string& key, bool* out) {
    if (!Has(key)) return true;
    if (!At(key).is_boolean())
      return Fail(key, absl::StrCat(key, " must be true or false, got ", Shown(At(key))));
    *out = At(key).get<bool>();
    return true;
  }
  // Every key is one of `known`.
  bool OnlyKnown(const std::set<std::string>& known) {
    for (auto it = body_.begin(); it != body_.end(); ++it) {
      if (!known.count(it.key())) {
        return Fail(it.key(), absl::StrCat("Unrecognized request argument supplied: ", it.key()));
      }
    }
    return true;
  }

 private:
  const Json& body_;
  ApiError* error_;
  const Tokenizer::StopCheck& stop_;
  bool failed_ = false;
};

const std::set<std::string> kCommonKeys = {
    "model", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options", "stop",
    "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "seed", "user",
    // vLLM's extensions, named as there
    "top_k", "min_p", "repetition_penalty", "ignore_eos", "stop_token_ids", "guided_json", "guided_regex",
    "guided_choice", "guided_grammar",
    // OpenAI's structured outputs (chat), accepted by completions too as vLLM does
    "response_format"};

// A string parameter, or a failure naming it.
const std::string* StringParam(Params& p, const std::string& key) {
  if (!p.Has(key)) return nullptr;
  if (!p.At(key).is_string()) {
    p.Fail(key, absl::StrCat(key, " must be a string"));
    return nullptr;
  }
  return &p.At(key).get_ref<const std::string&>();
}

// OpenAI's response_format and vLLM's guided_* parameters into
// base.constraint (docs/structured_outputs.md): at most one of them. The
// constraint itself is compiled, and a bad one refused naming the parameter,
// when the Generate is admitted.
bool ConstraintInto(Params& p, OpenAiRequest& r, pb::GenerateRequest& base) {
  pb::Constraint c;
  std::vector<std::string> given;
  if (p.Has("response_format")) {
    const Json& f = p.At("response_format");
    const std::string type =
        f.is_object() && f.contains("type") && f["type"].is_string() ? f["type"].get<std::string>() : "";
    if (type == "json_object") {
      c.set_json_object(true);
      given.push_back("response_format");
    } else if (type == "json_schema") {
      if (!f.contains("json_schema") || !f["json_schema"].is_object() ||
          !f["json_schema"].contains("schema") ||
          !(f["json_schema"]["schema"].is_object() || f["json_schema"]["schema"].is_boolean())) {
        return p.Fail(
            "response_format",
            "response_format.json_schema.schema is required (a JSON Schema object) with type json_schema");
      }
      c.set_json_schema(f["json_schema"]["schema"].dump());
      given.push_back("response_format");
    } else if (type != "text") {
      return p.Fail("response_format",
                    "response_format.type must be \"text\", \"json_object\" or \"json_schema\"");
    }
  }
  if (p.Has("guided_json")) {
    const Json& v = p.At("guided_json");
    if (!v.is_object() && !v.is_string())
      return p.Fail("guided_json", "guided_json must be a JSON Schema (an object or its text)");
    c.set_json_schema(v.is_string() ? v.get<std::string>() : v.dump());
    given.push_back("guided_json");
  }
  if (const std::string* re = StringParam(p, "guided_regex")) {
    c.set_regex(*re);
    given.push_back("guided_regex");
  }
  if (const std::string* g = StringParam(p, "guided_grammar")) {
    c.set_grammar(*g);
    given.push_back("guided_grammar");
  }
  if (p.Has("guided_choice")) {
    const Json& v = p.At("guided_choice");
    if (!v.is_array() || v.empty())
      return p.Fail("guided_choice", "guided_choice must be a non-empty list of strings");
    for (const Json& e : v) {
      if (!e.is_string()) return p.Fail("guided_choice", "guided_choice must be a non-empty list of strings");
      c.mutable_choice()->add_options(e.get<std::string>());
    }
    given.push_back("guided_choice");
  }
  if (p.failed()) return false;
  if (given.size() > 1) {
    return p.Fail(given[1],
                  absl::StrCat(given[0], " and ", given[1], " each constrain the output; give one"));
  }
  if (given.empty()) return true;
  r.constraint_param = given[0];
  *base.mutable_constraint() = std::move(c);
  return true;
}

// The parameters both endpoints share, into `base` and `r`.
bool ParseCommon(Params& p, const ModelContext& model, OpenAiRequest& r, pb::GenerateRequest& base) {
  if (!p.Has("model") || !p.At("model").is_string()) return p.Fail("model", "model is required (a string)");
  r.model = p.At("model").get<std::string>();
  bool known = false;
  for (const std::string& name : model.names) known |= name == r.model;
  if (!known) {
    p.Fail("model", absl::StrCat("The model '", r.model, "' does not exist; this server serves '",
                                 absl::StrJoin(model.names, "', '"), "'"));
    p.SetStatus(404, "model_not_found");
    return false;
  }
  pb::SamplingParams& s = *base.mutable_sampling();
  // OpenAI documents 0 to 2, narrower than the engine's kTemperatureBound.
  s.set_temperature(p.Number("temperature", 0, 2, false).value_or(1.0f));
  if (auto v = p.Bounded("top_p", kTopPBound)) s.set_top_p(*v);
  if (auto v = p.Bounded("presence_penalty", kPresencePenaltyBound)) s.set_presence_penalty(*v);
  if (auto v = p.Bounded("frequency_penalty", kFrequencyPenaltyBound)) s.set_frequency_penalty(*v);
  if (auto v = p.Bounded("min_p", kMinPBound)) s.set_min_p(*v);
  if (auto v = p.Bounded("repetition_penalty", kRepetitionPenaltyBound)) s.set_repetition_penalty(*v);
  int64_t i = 0;
  if (p.Integer("top_k", -1, model.vocab_size, &i))
    s.set_top_k(static_cast<int32_t>(std::max<int64_t>(i, 0)));
  if (p.Has("seed")) {
    const Json& v = p.At("seed");
    if (!v.is_number_integer()) return p.Fail("seed", "seed must be an integer, got " + Shown(v));
    s.set_seed(v.is_number_unsigned() ? v.get<uint64_t>() : static_cast<uint64_t>(v.get<int64_t>()));
  }
  int64_t n = 1;
  if (p.Integer("n", 1, kMaxSamples, &n)) r.n = static_cast<int>(n);
  base.set_n(r.n);
  p.Bool("stream", &r.stream);
  if (p.Has("stream_options")) {
    const Json& so = p.At("stream_options");
    if (!r.stream) return p.Fail("stream_options", "stream_options is only allowed when stream is true");
    if (!so.is_object()) return p.Fail("stream_options", "stream_options must be an object");
    for (auto it = so.begin(); it != so.end(); ++it) {
      if (it.key() == "include_usage" && it.value().is_boolean()) {
        r.include_usage = it.value().get<bool>();
      } else if (it.key() != "include_usage") {
        return p.Fail("stream_options." + it.key(), "Unrecognized stream option: " + it.key());
      } else {
        return p.Fail("stream_options.include_usage", "stream_options.include_usage must be true or false");
      }
    }
  }
  if (p.Has("stop")) {
    const Json& v = p.At("stop");
    std::vector<std::string> stops;
    if (v.is_string()) {
      stops.push_back(v.get<std::string>());
    } else if (v.is_array()) {
      for (const Json& e : v) {
        if (!e.is_string()) return p.Fail("stop", "stop must be a string or a list of strings");
        stops.push_back(e.get<std::string>());
      }
    } else {
      return p.Fail("stop", "stop must be a string or a list of strings");
    }
    if (stops.size() > static_cast<size_t>(kMaxStopStrings))
      return p.Fail("stop",
                    absl::StrCat("stop holds at most ", kMaxStopStrings, " strings, got ", stops.size()));
    for (size_t k = 0; k < stops.size(); ++k) {
      if (stops[k].empty() || stops[k].size() > static_cast<size_t>(kMaxStopStringBytes))
        return p.Fail("stop", absl::StrCat("stop[", k, "] must be 1 to ", kMaxStopStringBytes, " bytes"));
      base.add_stop(stops[k]);
    }
  }
  if (p.Has("logit_bias")) {
    const Json& v = p.At("logit_bias");
    if (!v.is_object()) return p.Fail("logit_bias", "logit_bias must be an object of token id -> bias");
    if (v.size() > static_cast<size_t>(kMaxLogitBias))
      return p.Fail("logit_bias", absl::StrCat("logit_bias holds at most ", kMaxLogitBias, " entries"));
    for (auto it = v.begin(); it != v.end(); ++it) {
      char* end = nullptr;
      const long id = std::strtol(it.key().c_str(), &end, 10);
      if (it.key().empty() || *end != '\0' || id < 0 || id >= model.vocab_size) {
        return p.Fail("logit_bias", absl::StrCat("logit_bias key '", it.key(), "' must be a token id in [0, ",
                                                 model.vocab_size, ")"));
      }
      if (!it.value().is_number() || !kLogitBiasBound.Contains(it.value().get<double>())) {
        return p.Fail("logit_bias", absl::StrCat("logit_bias for token ", id, " must be in ",
                                                 kLogitBiasBound.Text(), ", got ", Shown(it.value())));
      }
      (*s.mutable_logit_bias())[static_cast<int32_t>(id)] = it.value().get<float>();
    }
  }
  bool ignore_eos = false;
  if (p.Bool("ignore_eos", &ignore_eos)) base.set_ignore_eos(ignore_eos);
  if (p.Has("stop_token_ids")) {
    const Json& v = p.At("stop_token_ids");
    if (!v.is_array()) return p.Fail("stop_token_ids", "stop_token_ids must be a list of token ids");
    for (const Json& e : v) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= model.vocab_size) {
        return p.Fail("stop_token_ids",
                      absl::StrCat("stop_token_ids must hold token ids in [0, ", model.vocab_size, ")"));
      }
      base.add_stop_token_ids(e.get<int32_t>());
    }
  }
  if (p.Has("user") && !p.At("user").is_string()) return p.Fail("user", "user must be a string");
  if (!ConstraintInto(p, r, base)) return false;
  return !p.failed();
}

// Sets max_new_tokens from the endpoint's parameter (or the rest of the
// context) and checks the prompt fits.
bool SetLength(Params& p, const ModelContext& model, const std::string& param, int64_t default_tokens,
               const std::string& prompt_param, pb::GenerateRequest& g) {
  const int64_t prompt = g.prompt().token_ids().ids_size();
  if (prompt == 0) return p.Fail(prompt_param, prompt_param + " must not be empty");
  if (prompt >= model.max_context) {
    return p.Fail(prompt_param, absl::StrCat("The prompt is ", prompt, " tokens; this model's context holds ",
                                             model.max_context, " (prompt plus completion)"));
  }
  int64_t max_tokens = default_tokens < 0 ? model.max_context - prompt : default_tokens;
  if (!p.Integer(param, 0, model.max_context, &max_tokens)) return false;
  if (prompt + max_tokens > model.max_context) {
    return p.Fail(param, absl::StrCat("This model's context holds ", model.max_context, " tokens, but ",
                                      prompt, " prompt tokens plus ", param, "=", max_tokens, " is ",
                                      prompt + max_tokens, "; lower ", param, " or shorten the prompt"));
  }
  g.set_max_new_tokens(static_cast<int32_t>(max_tokens));
  return true;
}

bool SetTokens(Params& p, const std::string& field, const Json& v, const ModelContext& model,
               pb::GenerateRequest& g) {
  if (v.is_string()) {
    if (model.tokenizer == nullptr)
      return p.Fail(field, field + " as text needs a tokenizer.json in the model; send token ids");
    auto ids = p.Encode(field, v.get<std::string>(), model, /*add_special_tokens=*/true);
    if (!ids) return false;
    g.mutable_prompt()->mutable_token_ids()->mutable_ids()->Add(ids->begin(), ids->end());
    return true;
  }
  for (const Json& e : v) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= model.vocab_size) {
      return p.Fail(field, absl::StrCat(field, " token ids must be in [0, ", model.vocab_size, ")"));
    }
    g.mutable_prompt()->mutable_token_ids()->add_ids(e.get<int32_t>());
  }
  return true;
}

// The parameters of /v1/completions alone: one Generate per prompt.
bool CompletionInto(Params& p, const ModelContext& model, OpenAiRequest& r,
                    const pb::GenerateRequest& common) {
  pb::GenerateRequest base = common;
  bool echo = false;
  if (!p.Bool("echo", &echo)) return false;
  if (echo) return p.Fail("echo", "echo is not supported");
  if (p.Has("suffix")) return p.Fail("suffix", "suffix is not supported");
  int64_t best_of = r.n;
  if (!p.Integer("best_of", 1, kMaxSamples, &best_of)) return false;
  if (best_of != r.n) return p.Fail("best_of", "best_of other than n is not supported");
  int64_t logprobs = -1;
  if (!p.Integer("logprobs", 0, kMaxTopLogprobs, &logprobs)) return false;
  if (logprobs >= 0) {
    r.logprobs = true;
    r.top_logprobs = static_cast<int>(logprobs);
    base.set_top_logprobs(r.top_logprobs);
  }
  // prompt: a string, a list of strings, a list of token ids, or a list of those lists.
  if (!p.Has("prompt")) return p.Fail("prompt", "prompt is required");
  const Json& prompt = p.At("prompt");
  std::vector<const Json*> prompts;
  if (prompt.is_string()) {
    prompts.push_back(&prompt);
  } else if (prompt.is_array() && !prompt.empty() && prompt[0].is_number()) {
    prompts.push_back(&prompt);
  } else if (prompt.is_array() && !prompt.empty()) {
    for (const Json& e : prompt) {
      if (!e.is_string() && !(e.is_array() && std::all_of(e.begin(), e.end(), [](const Json& x) {
                                return x.is_number_integer();
                              }))) {
        return p.Fail("prompt",
                      "prompt must be a string, a list of strings, a list of token ids, or a list of "
                      "token-id lists");
      }
      prompts.push_back(&e);
    }
  } else {
    return p.Fail("prompt", "prompt must be a non-empty string, list of strings, or list of token ids");
  }
  if (prompts.size() > static_cast<size_t>(kMaxPrompts)) {
    return p.Fail("prompt",
                  absl::StrCat("prompt holds at most ", kMaxPrompts, " prompts, got ", prompts.size()));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    pb::GenerateRequest g = base;
    const std::string field = prompts.size() > 1 ? absl::StrCat("prompt[", i, "]") : "prompt";
    if (!SetTokens(p, field, *prompts[i], model, g)) return false;
    if (!SetLength(p, model, "max_tokens", 16, "prompt", g)) return false;
    r.prompts.push_back(std::move(g));
  }
  return true;
}

// Tools offered (and tool_choice not "none"): the reply is parsed into
// tool_calls in the chat template's own syntax; "required" or a named
// function ("*" or the name in `forced`) constrains decoding to one call.
bool ToolCallsInto(Params& p, const ModelContext& model, const std::string& forced, const Json& tools,
                   OpenAiRequest& r, pb::GenerateRequest& g) {
  const std::set<std::string> names = ToolNames(tools);
  const ToolFormat format = ToolFormatOf(model.chat_template->sources());
  if (!forced.empty()) {
    if (names.empty())
      return p.Fail("tool_choice", "tool_choice \"required\" or a named function needs tools");
    if (forced != "*" && !names.count(forced)) {
      return p.Fail("tool_choice",
                    absl::StrCat("tool_choice names the function '", forced, "', which is not among tools"));
    }
    if (g.has_constraint()) {
      return p.Fail("tool_choice",
                    absl::StrCat(r.constraint_param, " and tool_choice each constrain the output; give one"));
    }
    g.mutable_constraint()->set_grammar(ForcedCallGrammar(format, tools, forced == "*" ? "" : forced));
    r.constraint_param = "tool_choice";
  }
  if (names.empty()) return true;
  r.parse_tool_calls = true;
  r.tool_format = format;
  r.tool_names = names;
  return true;
}

// The parameters of /v1/chat/completions alone: the messages rendered by the
// model's chat template into one prompt.
bool ChatInto(Params& p, const ModelContext& model, OpenAiRequest& r, const pb::GenerateRequest& common) {
  pb::GenerateRequest g = common;
  if (!p.Bool("logprobs", &r.logprobs)) return false;
  int64_t top = 0;
  if (!p.Integer("top_logprobs", 0, kMaxTopLogprobs, &top)) return false;
  if (p.Has("top_logprobs") && !r.logprobs)
    return p.Fail("top_logprobs", "top_logprobs needs logprobs set to true");
  r.top_logprobs = static_cast<int>(top);
  g.set_top_logprobs(r.top_logprobs);
  // tool_choice: "none", "auto" (the default), "required" ("*" below) or one named function.
  std::string forced;
  if (p.Has("tool_choice")) {
    const Json& t = p.At("tool_choice");
    if (t.is_string() && (t == "none" || t == "auto" || t == "required")) {
      if (t == "required") forced = "*";
    } else if (t.is_object() && t.contains("type") && t["type"] == "function" && t.contains("function") &&
               t["function"].is_object() && t["function"].contains("name") &&
               t["function"]["name"].is_string()) {
      forced = t["function"]["name"].get<std::string>();
    } else {
      return p.Fail("tool_choice",
                    "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                    "\"function\": {\"name\": ...}}");
    }
  }
  bool store = false;
  if (!p.Bool("store", &store)) return false;
  if (store) return p.Fail("store", "store is not supported");
  if (model.chat_template == nullptr || model.tokenizer == nullptr) {
    return p.Fail("messages",
                  "this model has no chat template (tokenizer_config.json chat_template); use "
                  "/v1/completions");
  }
  // messages: roles checked, content flattened to text as the templates expect.
  if (!p.Has("messages") || !p.At("messages").is_array() || p.At("messages").empty()) {
    return p.Fail("messages", "messages must be a non-empty list");
  }
  Json messages = Json::array();
  const Json& in = p.At("messages");
  for (size_t i = 0; i < in.size(); ++i) {
    const std::string at = absl::StrCat("messages[", i, "]");
    const Json& m = in[i];
    if (!m.is_object()) return p.Fail(at, at + " must be an object");
    if (!m.contains("role") || !m["role"].is_string())
      return p.Fail(at + ".role", at + ".role is required (a string)");
    std::string role = m["role"].get<std::string>();
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return p.Fail(at + ".role",
                    absl::StrCat(at, ".role must be one of system, developer, user, assistant, tool; got '",
                                 role, "'"));
    }
    Json out = m;
    out["role"] = role;
    std::string text;
    if (!m.contains("content") || m["content"].is_null()) {
      if (role != "assistant") return p.Fail(at + ".content", at + ".content is required");
    } else if (m["content"].is_string()) {
      text = m["content"].get<std::string>();
    } else if (m["content"].is_array()) {
      for (size_t j = 0; j < m["content"].size(); ++j) {
        const Json& part = m["content"][j];
        const std::string pat = absl::StrCat(at, ".content[", j, "]");
        if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
          return p.Fail(pat,
                        absl::StrCat(pat, " must be {\"type\": \"text\", \"text\": ...}; ",
                                     part.is_object() && part.contains("type") ? Shown(part["type"]) : "this",
                                     " content is not supported"));
        }
        if (j > 0) text += "\n";  // as vLLM joins text parts
        text += part["text"].get<std::string>();
      }
    } else {
      return p.Fail(at + ".content", at + ".content must be a string or a list of text parts");
    }
    out["content"] = text;
    // OpenAI sends a tool call's arguments as a JSON string; templates (and
    // transformers' docs) expect the object, which they print with tojson.
    // Text that is not JSON stays a string; JSON nested too deep is refused
    // as the body itself would be.
    if (out.contains("tool_calls") && out["tool_calls"].is_array()) {
      for (size_t k = 0; k < out["tool_calls"].size(); ++k) {
        Json& call = out["tool_calls"][k];
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
        Json& fn = call["function"];
        if (!fn.contains("arguments") || !fn["arguments"].is_string()) continue;
        try {
          fn["arguments"] = ParseJson(fn["arguments"].get<std::string>());
        } catch (const Json::exception&) {
        } catch (const std::invalid_argument& e) {
          const std::string param = absl::StrCat(at, ".tool_calls[", k, "].function.arguments");
          return p.Fail(param, absl::StrCat(param, ": ", e.what()));
        }
      }
    }
    messages.push_back(std::move(out));
  }
  Json tools;
  if (p.Has("tools")) {
    if (!p.At("tools").is_array()) return p.Fail("tools", "tools must be a list");
    if (!(p.Has("tool_choice") && p.At("tool_choice") == "none")) tools = p.At("tools");
  }
  if (!ToolCallsInto(p, model, forced, tools, r, g)) return false;
  bool add_generation_prompt = true;
  if (!p.Bool("add_generation_prompt", &add_generation_prompt)) return false;
  Json extra;
  if (p.Has("chat_template_kwargs")) {
    if (!p.At("chat_template_kwargs").is_object())
      return p.Fail("chat_template_kwargs", "chat_template_kwargs must be an object");
    extra = p.At("chat_template_kwargs");
  }
  auto text = model.chat_template->Apply(messages, add_generation_prompt, tools, extra);
  if (!text.ok()) {
    return p.Fail("messages",
                  absl::StrCat("the chat template rejected the messages: ", text.status().message()));
  }
  auto ids =
      p.Encode("messages", *text, model, /*add_special_tokens=*/!model.chat_template->StartsWithBos(*text));
  if (!ids) return false;
  g.mutable_prompt()->mutable_token_ids()->mutable_ids()->Add(ids->begin(), ids->end());
  const std::string length_param = p.Has("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (!SetLength(p, model, length_param, -1, "messages", g)) return false;
  r.prompts.push_back(std::move(g));
  return true;
}

}  // namespace

Json ApiError::Body() const {
  Json e = Json::object();
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? Json() : Json(param);
  e["code"] = code.empty() ? Json() : Json(code);
  Json body = Json::object();
  body["error"] = std::move(e);
  return body;
}

namespace {

// The OpenAI parameter a request field of the gRPC API (common/status.h
// ErrorField) stands for: the same name, but for the token budget, the
// prompt's parts and the constraint (which came as the parameter parsed).
std::string OpenAiParam(const std::string& field, const std::string& constraint_param) {
  if (field == "max_new_tokens") return "max_tokens";
  if (field.rfind("prompt", 0) == 0) return "prompt";
  if (field.rfind("constraint.", 0) == 0)
    return constraint_param.empty() ? "response_format" : constraint_param;
  return field;
}

}  // namespace

ApiError FromStatus(const grpc::Status& status, const std::string& constraint_param) {
  ApiError e;
  e.message = absl::StrReplaceAll(status.error_message(), {{"max_new_tokens", "max_tokens"}});
  switch (status.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::FAILED_PRECONDITION:
      e.http_status = 400;
      e.param = OpenAiParam(GrpcErrorField(status), constraint_param);
      break;
    case grpc::StatusCode::UNAUTHENTICATED:
      e = ApiError{401, e.message, "authentication_error", "", "invalid_api_key"};
      break;
    case grpc::StatusCode::PERMISSION_DENIED:
      e = ApiError{403, e.message, "permission_error", "", ""};
      break;
    case grpc::StatusCode::NOT_FOUND:
      e = ApiError{404, e.message, "not_found_error", "", ""};
      break;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      e = ApiError{429, e.message, "rate_limit_error", "", ""};
      break;
    case grpc::StatusCode::UNAVAILABLE:
      e = ApiError{503, e.message, "service_unavailable_error", "", ""};
      break;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      e = ApiError{504, e.message, "timeout_error", "", ""};
      break;
    case grpc::StatusCode::CANCELLED:
      e = ApiError{499, e.message, "cancelled", "", ""};
      break;
    default:
      e = ApiError{500, e.message, "server_error", "", ""};
      break;
  }
  return e;
}

Json ParseJson(const std::string& text) {
  return Json::parse(text, [](int depth, Json::parse_event_t, Json&) {
    if (depth > kMaxJsonDepth) {
      throw std::invalid_argument(absl::StrCat("nesting deeper than ", kMaxJsonDepth, " levels"));
    }
    return true;
  });
}

bool ParseRequest(Endpoint endpoint, const Json& body, const ModelContext& model, OpenAiRequest* out,
                  ApiError* error, const Tokenizer::StopCheck& stop) {
  if (!body.is_object()) {
    *error = ApiError{400, "the request body must be a JSON object", "invalid_request_error", "", ""};
    return false;
  }
  const bool chat = endpoint == Endpoint::kChat;
  Params p(body, error, stop);
  std::set<std::string> known = kCommonKeys;
  if (chat) {
    known.insert({"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice",
                  "parallel_tool_calls", "store", "metadata", "service_tier", "add_generation_prompt",
                  "chat_template_kwargs"});
  } else {
    known.insert({"prompt", "echo", "best_of", "suffix"});
  }
  if (!p.OnlyKnown(known)) return false;
  OpenAiRequest r;
  r.endpoint = endpoint;
  pb::GenerateRequest common;
  if (!ParseCommon(p, model, r, common)) return false;
  if (!(chat ? ChatInto(p, model, r, common) : CompletionInto(p, model, r, common))) return false;
  // More sequences than the server ever queues at once can never run: a client
  // error, not a "retry later".
  const int64_t sequences = static_cast<int64_t>(r.prompts.size()) * r.n;
  if (model.max_queued_sequences > 0 && sequences > model.max_queued_sequences) {
    return p.Fail(chat ? "n" : "prompt",
                  absl::StrCat("this request asks for ", r.prompts.size(), " prompt(s) x n = ", r.n, ", ",
                               sequences, " sequences; this server queues at most ",
                               model.max_queued_sequences, " at once (--max-queued-requests)"));
  }
  *out = std::move(r);
  return true;
}

std::string Event(const Json& j) {
  return absl::StrCat("data: ", j.dump(-1, ' ', false, Json::error_handler_t::replace), "\n\n");
}

ResponseWriter::ResponseWriter(const OpenAiRequest& request, const Tokenizer* tokenizer, std::string id,
                               int64_t created, std::function<bool(const std::string&)> send)
    : request_(request),
      tokenizer_(tokenizer),
      id_(std::move(id)),
      created_(created),
      send_(std::move(send)) {
  choices_.resize(request_.prompts.size() * request_.n);
}

Json ResponseWriter::Chunk(Json choices) const {
  Json j = Json::object();
  j["id"] = id_;
  j["object"] = request_.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion";
  j["created"] = created_;
  j["model"] = request_.model;
  j["choices"] = std::move(choices);
  if (request_.include_usage) j["usage"] = nullptr;
  return j;
}

bool ResponseWriter::Send(const Json& j) { return send_(Event(j)); }

std::string ResponseWriter::TokenText(int32_t id) const {
  return tokenizer_ ? tokenizer_->TokenBytes(id, /*skip_special=*/false) : absl::StrCat("token_id:", id);
}

Json ResponseWriter::TokenEntry(int32_t id, float logprob) const {
  Json e = Json::object();
  e["token"] = TokenText(id);
  e["logprob"] = logprob;
  Json b = Json::array();
  if (tokenizer_) {
    for (unsigned char c : tokenizer_->TokenBytes(id, /*skip_special=*/false))
      b.push_back(static_cast<int>(c));
  }
  e["bytes"] = std::move(b);
  return e;
}

void ResponseWriter::AddLogprobs(Choice& c, const pb::GenerateResponse& msg, int64_t text_chars) {
  // text_offset counts characters, as OpenAI's does: each token starts where
  // the text before it ends (a token ending mid-character counts the
  // character where it completes).
  int64_t offset = text_chars;
  for (int t = 0; t < msg.token_ids_size(); ++t) {
    const pb::TopLogprobs* alts = t < msg.top_logprobs_size() ? &msg.top_logprobs(t) : nullptr;
    const int num_top = alts ? std::min(alts->alternatives_size(), request_.top_logprobs) : 0;
    if (request_.endpoint == Endpoint::kChat) {
      Json e = TokenEntry(msg.token_ids(t), msg.logprobs(t));
      Json top = Json::array();
      for (int k = 0; k < num_top; ++k)
        top.push_back(TokenEntry(alts->alternatives(k).id(), alts->alternatives(k).logprob()));
      e["top_logprobs"] = std::move(top);
      c.content.push_back(std::move(e));
    } else {
      Json top = Json::object();
      for (int k = 0; k < num_top; ++k)
        top[TokenText(alts->alternatives(k).id())] = alts->alternatives(k).logprob();
      c.tokens.push_back(TokenText(msg.token_ids(t)));
      c.token_logprobs.push_back(msg.logprobs(t));
      c.top.push_back(std::move(top));
      c.offsets.push_back(offset);
      if (tokenizer_ != nullptr)
        offset += Utf8Length(tokenizer_->TokenBytes(msg.token_ids(t), /*skip_special=*/true));
    }
  }
}

Json ResponseWriter::Logprobs(Choice& c, bool take) {
  if (!request_.logprobs) return Json();
  Json out = request_.endpoint == Endpoint::kChat ? Json{{"content", c.content}}
                                                  : Json{{"tokens", c.tokens},
                                                         {"token_logprobs", c.token_logprobs},
                                                         {"top_logprobs", c.top},
                                                         {"text_offset", c.offsets}};
  if (take) c.content = c.tokens = c.token_logprobs = c.top = c.offsets = Json::array();
  return out;
}

bool ResponseWriter::SendPlainText(size_t index, Choice& c) {
  const size_t plain = PlainTextPrefix(request_.tool_format, c.text);
  if (plain <= c.sent) return true;
  Json choice = {{"index", index},
                 {"delta", {{"content", c.text.substr(c.sent, plain - c.sent)}}},
                 {"logprobs", Logprobs(c, /*take=*/true)},
                 {"finish_reason", nullptr}};
  c.sent = plain;
  return Send(Chunk(Json::array({choice})));
}

bool ResponseWriter::SendToolCalls(size_t index, Choice& c) {
  ParsedReply reply = ParseToolCalls(request_.tool_format, c.text, request_.tool_names);
  bool ok = true;
  // The held-back text: what is left of the content (all of it when there is no call).
  std::string rest;
  if (reply.calls.empty()) {
    rest = c.text.substr(std::min(c.sent, c.text.size()));
  } else if (reply.content.size() > c.sent && reply.content.compare(0, c.sent, c.text, 0, c.sent) == 0) {
    rest = reply.content.substr(c.sent);
  }
  if (!rest.empty()) {
    Json choice = {
        {"index", index}, {"delta", {{"content", rest}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    ok &= Send(Chunk(Json::array({choice})));
  }
  c.sent = c.text.size();
  if (reply.calls.empty()) return ok;
  // As OpenAI chunks a call: its id, type and name first, then its arguments.
  const Json calls = ToolCallsJson(reply.calls, /*stream=*/true);
  for (const Json& call : calls) {
    Json head = call;
    head["function"]["arguments"] = "";
    Json args = {{"index", call["index"]}, {"function", {{"arguments", call["function"]["arguments"]}}}};
    for (const Json& part : {head, args}) {
      Json choice = {{"index", index},
                     {"delta", {{"tool_calls", Json::array({part})}}},
                     {"logprobs", nullptr},
                     {"finish_reason", nullptr}};
      ok &= Send(Chunk(Json::array({choice})));
    }
  }
  c.finish_reason = "tool_calls";
  return ok;
}

Json ResponseWriter::ToolCallsJson(const std::vector<ToolCall>& calls, bool stream) {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    std::string id = "call_";
    for (int k = 0; k < 24; ++k) id += kAlphabet[call_ids_() % (sizeof(kAlphabet) - 1)];
    Json call = {{"id", id},
                 {"type", "function"},
                 {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (stream) call["index"] = i;
    out.push_back(std::move(call));
  }
  return out;
}

bool ResponseWriter::Add(int prompt, const pb::GenerateResponse& msg) {
  std::lock_guard<std::mutex> lock(mu_);
  if (msg.results_size() > 0) {  // the last message: finish reasons and usage
    prompt_tokens_ += msg.usage().prompt_tokens();
    cached_tokens_ += msg.usage().cached_tokens();
    completion_tokens_ += msg.usage().generated_tokens();
  }
  const bool chat = request_.endpoint == Endpoint::kChat;
  const size_t index = static_cast<size_t>(prompt) * request_.n + msg.sample();
  Choice& c = choices_.at(index);
  if (request_.logprobs) AddLogprobs(c, msg, Utf8Length(c.text));
  c.text += msg.text();
  bool ok = true;
  if (request_.stream) {
    if (chat && !c.role_sent) {
      c.role_sent = true;
      Json choice = {{"index", index},
                     {"delta", {{"role", "assistant"}}},
                     {"logprobs", nullptr},
                     {"finish_reason", nullptr}};
      ok &= Send(Chunk(Json::array({choice})));
    }
    // Text only when there is some: a token whose text is held back (part of
    // a character, or perhaps of a stop string) waits for the next.
    if (request_.parse_tool_calls) {
      ok &= SendPlainText(index, c);
    } else if (!msg.text().empty()) {
      Json choice = Json::object();
      choice["index"] = index;
      if (chat) {
        choice["delta"] = {{"content", msg.text()}};
      } else {
        choice["text"] = msg.text();
      }
      choice["logprobs"] = Logprobs(c, /*take=*/true);
      choice["finish_reason"] = nullptr;
      ok &= Send(Chunk(Json::array({choice})));
    }
  }
  for (const pb::SampleResult& sr : msg.results()) {
    const size_t i = static_cast<size_t>(prompt) * request_.n + sr.sample();
    Choice& done = choices_.at(i);
    done.finish_reason = sr.finish_reason();
    if (!request_.stream) continue;
    if (request_.parse_tool_calls) ok &= SendToolCalls(i, done);
    Json choice = Json::object();
    choice["index"] = i;
    if (chat) {
      choice["delta"] = Json::object();
    } else {
      choice["text"] = "";
    }
    // Logprobs of tokens whose text never came (held back to the end).
    const bool left = chat ? !done.content.empty() : !done.tokens.empty();
    choice["logprobs"] = left ? Logprobs(done, /*take=*/true) : Json();
    choice["finish_reason"] = done.finish_reason;
    ok &= Send(Chunk(Json::array({choice})));
  }
  return ok;
}

bool ResponseWriter::Finish() {
  std::lock_guard<std::mutex> lock(mu_);
  Json usage = {{"prompt_tokens", prompt_tokens_},
                {"completion_tokens", completion_tokens_},
                {"total_tokens", prompt_tokens_ + completion_tokens_},
                {"prompt_tokens_details", {{"cached_tokens", cached_tokens_}}}};
  if (request_.stream) {
    bool ok = true;
    if (request_.include_usage) {
      Json j = Chunk(Json::array());
      j["usage"] = usage;
      ok &= Send(j);
    }
    return ok && send_("data: [DONE]\n\n");
  }
  const bool chat = request_.endpoint == Endpoint::kChat;
  Json choices = Json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    Json choice = Json::object();
    choice["index"] = i;
    if (chat && request_.parse_tool_calls) {
      ParsedReply reply = ParseToolCalls(request_.tool_format, c.text, request_.tool_names);
      if (reply.calls.empty()) {
        choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      } else {
        choice["message"] = {{"role", "assistant"},
                             {"content", reply.content.empty() ? Json() : Json(reply.content)},
                             {"tool_calls", ToolCallsJson(reply.calls, /*stream=*/false)}};
        c.finish_reason = "tool_calls";
      }
    } else if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = Logprobs(c, /*take=*/false);
    choice["finish_reason"] = c.finish_reason;
    choices.push_back(std::move(choice));
  }
  Json j = Json::object();
  j["id"] = id_;
  j["object"] = chat ? "chat.completion" : "text_completion";
  j["created"] = created_;
  j["model"] = request_.model;
  j["choices"] = std::move(choices);
  j["usage"] = std::move(usage);
  return send_(j.dump(-1, ' ', false, Json::error_handler_t::replace));
}

bool ResponseWriter::Fail(const ApiError& error) {
  std::lock_guard<std::mutex> lock(mu_);
  return send_(Event(error.Body())) && send_("data: [DONE]\n\n");
}

}  // namespace openai
}  // namespace shardlm
