#include "coordinator/ollama/ollama_request.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chat/chat_template.h"
#include "common/status.h"
#include "coordinator/ollama/ollama_parse.h"
#include "step/sampling_limits.h"

namespace shardlm {
namespace ollama {
namespace {

using openai::Params;

const std::set<std::string> kCommonKeys = {"model", "stream",   "format", "options",  "keep_alive",
                                           "think", "truncate", "shift",  "logprobs", "top_logprobs"};
const std::set<std::string> kGenerateKeys = {"prompt",  "suffix", "system", "template",
                                             "context", "raw",    "images"};
const std::set<std::string> kChatKeys = {"messages", "tools"};

// A Go duration ("5m", "1h30m", "-1.5s", or a bare number of seconds), at most 64
// bytes; *zero when it is zero. Parsed by hand: a regex would recurse per repetition.
bool ParseDuration(const std::string& s, bool* zero) {
  if (s.empty() || s.size() > 64) return false;
  size_t i = s[0] == '-' || s[0] == '+' ? 1 : 0;
  bool any_nonzero = false;
  int terms = 0;
  while (i < s.size()) {
    const size_t start = i;
    int digits = 0, dots = 0;
    for (; i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.'); ++i) {
      s[i] == '.' ? ++dots : ++digits;
      any_nonzero |= s[i] >= '1' && s[i] <= '9';
    }
    if (i == start || digits == 0 || dots > 1) return false;
    ++terms;
    if (i == s.size()) {  // a bare number of seconds, only as the whole value
      *zero = !any_nonzero;
      return terms == 1;
    }
    size_t unit = 0;
    for (const char* u : {"ns", "us", "\xc2\xb5s", "ms", "s", "m", "h"}) {
      if (s.compare(i, std::strlen(u), u) == 0 && std::strlen(u) > unit) unit = std::strlen(u);
    }
    if (unit == 0) return false;
    i += unit;
  }
  *zero = !any_nonzero;
  return terms > 0;
}

// keep_alive: seconds, or a Go duration ("5m", "1h30m", "-1"); it changes nothing here (the
// model is never unloaded), but a malformed one is told. True when it asks to unload now.
bool KeepAliveOf(Params& p, bool* unload) {
  if (!p.Has("keep_alive")) return true;
  const Json& v = p.At("keep_alive");
  if (v.is_number()) {
    *unload = v.get<double>() == 0;
  } else if (v.is_string() && ParseDuration(v.get_ref<const std::string&>(), unload)) {
  } else {
    return p.Fail("keep_alive", "keep_alive must be a number of seconds or a duration such as \"5m\", got " +
                                    openai::Shown(v));
  }
  return true;
}

// format: "json" (any JSON object), a JSON Schema object, or "" / null (none).
bool FormatOf(Params& p, GenerateJob& job) {
  if (!p.Has("format")) return true;
  const Json& f = p.At("format");
  if (f.is_string() && f.get_ref<const std::string&>().empty()) return true;
  if (f == "json") {
    job.constraint.kind = ConstraintSpec::Kind::kJsonObject;
  } else if (f.is_object()) {
    job.constraint = {ConstraintSpec::Kind::kJsonSchema, f.dump(), {}};
  } else {
    return p.Fail("format", "format must be \"json\" or a JSON Schema object, got " + openai::Shown(f));
  }
  return true;
}

bool ModelOf(Params& p, const openai::ModelContext& model, OllamaRequest& r, OllamaError* error) {
  if (!p.Has("model") || !p.At("model").is_string() || p.At("model").get_ref<const std::string&>().empty())
    return p.Fail("model", "model is required");
  r.model = p.At("model").get<std::string>();
  if (!ServedName(model.names, r.model).empty()) return true;
  p.Fail("model", absl::StrCat("model '", r.model, "' not found; this server serves '",
                               absl::StrJoin(model.names, "', '"), "'"));
  error->status = 404;
  return false;
}

bool LogprobsOf(Params& p, OllamaRequest& r) {
  if (!p.Bool("logprobs", &r.logprobs)) return false;
  int64_t top = 0;
  if (!p.Integer("top_logprobs", 0, kMaxTopLogprobs, &top)) return false;
  r.top_logprobs = static_cast<int>(top);
  if (r.top_logprobs > 0) r.logprobs = true;
  r.job.request.sampling.num_top_logprobs = r.top_logprobs;
  return true;
}

// The fields both endpoints take, before the prompt.
bool CommonOf(Params& p, const openai::ModelContext& model, OllamaRequest& r, OllamaError* error,
              bool* unload) {
  if (!ModelOf(p, model, r, error)) return false;
  if (p.Has("stream") && !p.Bool("stream", &r.stream)) return false;
  bool ignored = false;
  if (!p.Bool("truncate", &ignored) || !p.Bool("shift", &ignored)) return false;
  return KeepAliveOf(p, unload) && FormatOf(p, r.job) && LogprobsOf(p, r);
}

// context: the ids a previous /api/generate returned, each inside the vocabulary.
bool ContextOf(Params& p, const openai::ModelContext& model, std::vector<int32_t>* ids) {
  if (!p.Has("context")) return true;
  const Json& v = p.At("context");
  if (!v.is_array()) return p.Fail("context", "context must be a list of token ids");
  for (const Json& e : v) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= model.vocab_size)
      return p.Fail("context", absl::StrCat("context must hold token ids in [0, ", model.vocab_size, ")"));
    ids->push_back(e.get<int32_t>());
  }
  return true;
}

// suffix: a fill-in-the-middle prompt from the model's FIM tokens.
bool FimInto(Params& p, const openai::ModelContext& model, const std::string& prompt, OllamaRequest& r) {
  if (model.fim == nullptr || model.tokenizer == nullptr) {
    return p.Fail("suffix",
                  absl::StrCat("suffix: \"", r.model,
                               "\" does not support insert (its tokenizer has no fill-in-the-middle "
                               "tokens such as <|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>)"));
  }
  auto ids = FimPrompt(*model.tokenizer, *model.fim, prompt, p.At("suffix").get<std::string>(),
                       model.max_context, "prompt", "suffix", p.stop());
  if (!ids.ok()) return p.Fail(ErrorField(ids.status()), std::string(ids.status().message()));
  r.job.request.prompt = std::move(*ids);
  auto& stops = r.job.request.stop_token_ids;
  stops.insert(stops.end(), model.fim->ends.begin(), model.fim->ends.end());
  return true;
}

// /api/generate's prompt: raw text, a fill-in-the-middle prompt, or one user turn (after
// `system`) through the chat template; after the `context` given.
bool GeneratePromptInto(Params& p, const openai::ModelContext& model, OllamaRequest& r) {
  for (const char* key : {"prompt", "suffix", "system", "template"}) {
    if (p.Has(key) && !p.At(key).is_string()) return p.Fail(key, std::string(key) + " must be a string");
  }
  bool raw = false;
  if (!p.Bool("raw", &raw)) return false;
  // Given and not empty ("" and [] are as good as absent, as in Ollama's Go structs).
  const auto given = [&](const char* key) {
    return p.Has(key) &&
           !(p.At(key).is_string() ? p.At(key).get_ref<const std::string&>().empty() : p.At(key).empty());
  };
  if (raw && (given("template") || given("system") || given("context")))
    return p.Fail("raw", "raw mode does not support template, system, or context");
  if (given("template"))
    return p.Fail("template",
                  "template (a Go template) is not supported: the model's own chat template is used");
  if (given("images")) return p.Fail("images", "images: the model served takes text only");
  std::vector<int32_t> context;
  if (!ContextOf(p, model, &context)) return false;
  const std::string prompt = p.Has("prompt") ? p.At("prompt").get<std::string>() : "";
  Json extra = Json::object();
  if (!ThinkOf(p, r.model, &extra)) return false;
  if (prompt.empty()) {
    r.load_only = true;
    return true;
  }
  r.return_context = !raw;
  if (model.tokenizer == nullptr)
    return p.Fail("prompt", "prompt as text needs a tokenizer.json in the model, which this one lacks");
  if (given("suffix")) {
    if (given("system"))
      return p.Fail("system", "system does not apply to a fill-in-the-middle prompt (suffix)");
    if (!FimInto(p, model, prompt, r)) return false;
  } else if (raw || model.chat_template == nullptr) {
    auto ids = p.Encode("prompt", prompt, model, /*add_special_tokens=*/true);
    if (!ids) return false;
    r.job.request.prompt = std::move(*ids);
  } else {
    Json messages = Json::array();
    if (given("system")) messages.push_back({{"role", "system"}, {"content", p.At("system")}});
    messages.push_back({{"role", "user"}, {"content", prompt}});
    auto text = model.chat_template->Apply(messages, /*add_generation_prompt=*/true, Json(), extra);
    if (!text.ok())
      return p.Fail("prompt", absl::StrCat("the chat template failed: ", text.status().message()));
    auto ids = p.Encode("prompt", *text, model, !model.chat_template->StartsWithBos(*text));
    if (!ids) return false;
    r.job.request.prompt = std::move(*ids);
  }
  r.job.request.prompt.insert(r.job.request.prompt.begin(), context.begin(), context.end());
  return true;
}

// max_new_tokens from num_predict, within the request's context.
bool LengthInto(Params& p, const Lengths& lengths, const std::string& prompt_field, EngineRequest& g) {
  const int64_t prompt = static_cast<int64_t>(g.prompt.size());
  if (prompt >= lengths.context) {
    return p.Fail(prompt_field, absl::StrCat("the prompt is ", prompt,
                                             " tokens; the context (options.num_ctx, "
                                             "or the model's) holds ",
                                             lengths.context, " with the reply"));
  }
  const int64_t room = lengths.context - prompt;
  g.max_new_tokens =
      static_cast<int32_t>(lengths.num_predict < 0 ? room : std::min(lengths.num_predict, room));
  return true;
}

bool Translate(OllamaEndpoint endpoint, Params& p, const openai::ModelContext& model, OllamaRequest& r,
               OllamaError* error) {
  const bool chat = endpoint == OllamaEndpoint::kChat;
  std::set<std::string> known = kCommonKeys;
  known.insert((chat ? kChatKeys : kGenerateKeys).begin(), (chat ? kChatKeys : kGenerateKeys).end());
  if (!p.OnlyKnown(known)) return false;
  bool unload = false;
  if (!CommonOf(p, model, r, error, &unload)) return false;
  Lengths lengths;
  if (!OptionsInto(p, model, r.job, &lengths)) return false;
  if (!(chat ? ChatPromptInto(p, model, r) : GeneratePromptInto(p, model, r))) return false;
  if (r.load_only && unload) {
    return p.Fail("keep_alive",
                  "keep_alive 0 with no prompt would unload the model; shardlm keeps the model "
                  "it was started with loaded");
  }
  return r.load_only || LengthInto(p, lengths, chat ? "messages" : "prompt", r.job.request);
}

}  // namespace

std::string ServedName(const std::vector<std::string>& served, const std::string& name) {
  for (const std::string& s : served) {
    if (absl::EqualsIgnoreCase(name, s) || absl::EqualsIgnoreCase(name, s + ":latest")) return s;
  }
  return "";
}

bool ParseOllamaRequest(OllamaEndpoint endpoint, const Json& body, const openai::ModelContext& model,
                        OllamaRequest* out, OllamaError* error, const Tokenizer::StopCheck& stop) {
  if (!body.is_object()) {
    *error = {400, "the request body must be a JSON object"};
    return false;
  }
  openai::ApiError api;
  Params p(body, &api, stop);
  OllamaRequest r;
  r.endpoint = endpoint;
  error->status = 400;
  if (!Translate(endpoint, p, model, r, error)) {
    error->message = api.message;
    if (api.http_status != 400) error->status = api.http_status;
    return false;
  }
  *out = std::move(r);
  return true;
}

}  // namespace ollama
}  // namespace shardlm
