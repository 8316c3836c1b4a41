#include "coordinator/openai/openai_api.h"

#include <algorithm>
#include <set>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "chat/fill_in_middle.h"
#include "common/status.h"
#include "coordinator/openai/openai_params.h"
#include "coordinator/openai_wire/response_format.h"
#include "coordinator/serving/request_limits.h"
#include "step/sampling_limits.h"

namespace shardlm {
namespace openai {
namespace {

constexpr int kMaxLogitBias = kMaxLogitBiasEntries;

const std::set<std::string> kCommonKeys = {
    "model", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options", "stop",
    "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "seed", "user",
    // vLLM's extensions, named as there
    "top_k", "min_p", "repetition_penalty", "ignore_eos", "stop_token_ids", "guided_json", "guided_regex",
    "guided_choice", "guided_grammar",
    // shardlm's: opt out of the server's speculative decoding (docs/speculative_decoding.md)
    "speculative",
    // OpenAI's structured outputs (chat), accepted by completions too as vLLM does
    "response_format"};

// OpenAI's response_format and vLLM's guided_* parameters into
// base.constraint (docs/structured_outputs.md): at most one of them. The
// constraint itself is compiled, and a bad one refused naming the parameter,
// when the Generate is admitted.
bool ConstraintInto(Params& p, OpenAiRequest& r, GenerateJob& base) {
  ConstraintSpec c;
  std::vector<std::string> given;
  if (p.Has("response_format")) {
    std::string error;
    if (!ConstraintFromFormat(p.At("response_format"), &c, &error)) return p.Fail("response_format", error);
    if (c.kind != ConstraintSpec::Kind::kNone) given.push_back("response_format");
  }
  if (p.Has("guided_json")) {
    const Json& v = p.At("guided_json");
    if (!v.is_object() && !v.is_string())
      return p.Fail("guided_json", "guided_json must be a JSON Schema (an object or its text)");
    c = {ConstraintSpec::Kind::kJsonSchema, v.is_string() ? v.get<std::string>() : v.dump(), {}};
    given.push_back("guided_json");
  }
  if (const std::string* re = StringParam(p, "guided_regex")) {
    c = {ConstraintSpec::Kind::kRegex, *re, {}};
    given.push_back("guided_regex");
  }
  if (const std::string* g = StringParam(p, "guided_grammar")) {
    c = {ConstraintSpec::Kind::kGrammar, *g, {}};
    given.push_back("guided_grammar");
  }
  if (p.Has("guided_choice")) {
    const Json& v = p.At("guided_choice");
    if (!v.is_array() || v.empty())
      return p.Fail("guided_choice", "guided_choice must be a non-empty list of strings");
    for (const Json& e : v) {
      if (!e.is_string()) return p.Fail("guided_choice", "guided_choice must be a non-empty list of strings");
      c.choices.push_back(e.get<std::string>());
    }
    c.kind = ConstraintSpec::Kind::kChoice;
    given.push_back("guided_choice");
  }
  if (p.failed()) return false;
  if (given.size() > 1) {
    return p.Fail(given[1],
                  absl::StrCat(given[0], " and ", given[1], " each constrain the output; give one"));
  }
  if (given.empty()) return true;
  r.constraint_param = given[0];
  base.constraint = std::move(c);
  return true;
}

// model: one of the names this server serves (404 model_not_found otherwise).
bool ModelOf(Params& p, const ModelContext& model, OpenAiRequest& r) {
  if (!p.Has("model") || !p.At("model").is_string()) return p.Fail("model", "model is required (a string)");
  r.model = p.At("model").get<std::string>();
  for (const std::string& name : model.names) {
    if (name == r.model) return true;
  }
  p.Fail("model", absl::StrCat("The model '", r.model, "' does not exist; this server serves '",
                               absl::StrJoin(model.names, "', '"), "'"));
  p.SetStatus(404, "model_not_found");
  return false;
}

// logit_bias: token id (as a string key) -> bias within kLogitBiasBound.
bool LogitBiasOf(Params& p, const ModelContext& model, SamplingParams& s) {
  if (!p.Has("logit_bias")) return true;
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
    // "5" and "05" are one token: the last value given wins, as in a map.
    const auto same = std::find_if(s.logit_bias.begin(), s.logit_bias.end(),
                                   [id](const auto& entry) { return entry.first == id; });
    if (same != s.logit_bias.end()) {
      same->second = it.value().get<float>();
    } else {
      s.logit_bias.emplace_back(static_cast<int32_t>(id), it.value().get<float>());
    }
  }
  return true;
}

// The sampling parameters, each within the one table of bounds
// (step/sampling_limits.h) but temperature, which OpenAI documents as 0 to 2.
bool SamplingOf(Params& p, const ModelContext& model, EngineRequest& r) {
  SamplingParams& s = r.sampling;
  s.temperature = p.Number("temperature", 0, 2, false).value_or(1.0f);
  if (auto v = p.Bounded("top_p", kTopPBound)) s.top_p = *v;
  if (auto v = p.Bounded("presence_penalty", kPresencePenaltyBound)) s.presence_penalty = *v;
  if (auto v = p.Bounded("frequency_penalty", kFrequencyPenaltyBound)) s.frequency_penalty = *v;
  if (auto v = p.Bounded("min_p", kMinPBound)) s.min_p = *v;
  if (auto v = p.Bounded("repetition_penalty", kRepetitionPenaltyBound)) s.repetition_penalty = *v;
  int64_t i = 0;
  if (p.Integer("top_k", -1, model.vocab_size, &i)) s.top_k = static_cast<int32_t>(std::max<int64_t>(i, 0));
  if (p.Has("seed")) {
    const Json& v = p.At("seed");
    if (!v.is_number_integer()) return p.Fail("seed", "seed must be an integer, got " + Shown(v));
    s.seed = v.is_number_unsigned() ? v.get<uint64_t>() : static_cast<uint64_t>(v.get<int64_t>());
    r.has_seed = true;
  }
  return true;
}

// stream and stream_options (include_usage only, and only when streaming).
bool StreamOf(Params& p, OpenAiRequest& r) {
  p.Bool("stream", &r.stream);
  if (!p.Has("stream_options")) return true;
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
  return true;
}

// stop: a string or a list of strings, each within the limits.
bool StopStringsOf(Params& p, GenerateJob& base) {
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
      base.stop.push_back(stops[k]);
    }
  }
  return true;
}

// vLLM's ignore_eos and stop_token_ids, and shardlm's opt-out of speculation.
bool StopTokensOf(Params& p, const ModelContext& model, EngineRequest& base) {
  bool ignore_eos = false;
  if (p.Bool("ignore_eos", &ignore_eos)) base.ignore_eos = ignore_eos;
  bool speculative = true;  // false: this request opts out of the server's --speculative
  if (p.Bool("speculative", &speculative)) base.speculate = speculative;
  if (!p.Has("stop_token_ids")) return true;
  const Json& v = p.At("stop_token_ids");
  if (!v.is_array()) return p.Fail("stop_token_ids", "stop_token_ids must be a list of token ids");
  for (const Json& e : v) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= model.vocab_size) {
      return p.Fail("stop_token_ids",
                    absl::StrCat("stop_token_ids must hold token ids in [0, ", model.vocab_size, ")"));
    }
    base.stop_token_ids.push_back(e.get<int32_t>());
  }
  return true;
}

// The parameters both endpoints share, into `base` and `r`.
bool ParseCommon(Params& p, const ModelContext& model, OpenAiRequest& r, GenerateJob& base) {
  if (!ModelOf(p, model, r)) return false;
  if (!SamplingOf(p, model, base.request)) return false;
  int64_t n = 1;
  if (p.Integer("n", 1, kMaxSamples, &n)) r.n = static_cast<int>(n);
  base.n = r.n;
  if (!StreamOf(p, r)) return false;
  if (!StopStringsOf(p, base)) return false;
  if (!LogitBiasOf(p, model, base.request.sampling)) return false;
  if (!StopTokensOf(p, model, base.request)) return false;
  if (p.Has("user") && !p.At("user").is_string()) return p.Fail("user", "user must be a string");
  if (!ConstraintInto(p, r, base)) return false;
  return !p.failed();
}

bool SetTokens(Params& p, const std::string& field, const Json& v, const ModelContext& model,
               EngineRequest& g) {
  if (v.is_string()) {
    if (model.tokenizer == nullptr)
      return p.Fail(field, field + " as text needs a tokenizer.json in the model; send token ids");
    auto ids = p.Encode(field, v.get<std::string>(), model, /*add_special_tokens=*/true);
    if (!ids) return false;
    g.prompt = std::move(*ids);
    return true;
  }
  for (const Json& e : v) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= model.vocab_size) {
      return p.Fail(field, absl::StrCat(field, " token ids must be in [0, ", model.vocab_size, ")"));
    }
    g.prompt.push_back(e.get<int32_t>());
  }
  return true;
}

// A fill-in-the-middle prompt (docs/ollama.md "Fill-in-the-middle"): the prompt
// before the gap, `suffix` after it; generation also ends at the FIM end tokens.
bool FimInto(Params& p, const std::string& field, const Json& prompt, const std::string& suffix,
             const ModelContext& model, EngineRequest& g) {
  if (!prompt.is_string()) return p.Fail(field, field + " must be text with suffix (fill-in-the-middle)");
  auto ids = FimPrompt(*model.tokenizer, *model.fim, prompt.get<std::string>(), suffix, model.max_context,
                       field, "suffix", p.stop());
  if (!ids.ok()) return p.Fail(ErrorField(ids.status()), std::string(ids.status().message()));
  g.prompt = std::move(*ids);
  g.stop_token_ids.insert(g.stop_token_ids.end(), model.fim->ends.begin(), model.fim->ends.end());
  return true;
}

// The parameters of /v1/completions alone: one Generate per prompt.
bool CompletionInto(Params& p, const ModelContext& model, OpenAiRequest& r, const GenerateJob& common) {
  GenerateJob base = common;
  bool echo = false;
  if (!p.Bool("echo", &echo)) return false;
  if (echo) return p.Fail("echo", "echo is not supported");
  const std::string* suffix = StringParam(p, "suffix");
  if (p.failed()) return false;
  if (suffix != nullptr && model.fim == nullptr) {
    return p.Fail("suffix", absl::StrCat("suffix: the model '", r.model,
                                         "' has no fill-in-the-middle tokens (such as <|fim_prefix|>, "
                                         "<|fim_suffix|>, <|fim_middle|>) in its tokenizer"));
  }
  int64_t indent = 0;  // llama.cpp's n_indent, for fill-in-the-middle (tokenizer/stop_text.h)
  if (!p.Integer("n_indent", 0, 1024, &indent)) return false;
  base.min_indent = static_cast<int>(indent);
  int64_t best_of = r.n;
  if (!p.Integer("best_of", 1, kMaxSamples, &best_of)) return false;
  if (best_of != r.n) return p.Fail("best_of", "best_of other than n is not supported");
  int64_t logprobs = -1;
  if (!p.Integer("logprobs", 0, kMaxTopLogprobs, &logprobs)) return false;
  if (logprobs >= 0) {
    r.logprobs = true;
    r.top_logprobs = static_cast<int>(logprobs);
    base.request.sampling.num_top_logprobs = r.top_logprobs;
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
    GenerateJob g = base;
    const std::string field = prompts.size() > 1 ? absl::StrCat("prompt[", i, "]") : "prompt";
    if (suffix != nullptr) {
      if (!FimInto(p, field, *prompts[i], *suffix, model, g.request)) return false;
    } else if (!SetTokens(p, field, *prompts[i], model, g.request)) {
      return false;
    }
    if (!SetLength(p, model, "max_tokens", 16, "prompt", g.request)) return false;
    r.prompts.push_back(std::move(g));
  }
  return true;
}

}  // namespace

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
    known.insert({"prompt", "echo", "best_of", "suffix", "n_indent"});
  }
  if (!p.OnlyKnown(known)) return false;
  OpenAiRequest r;
  r.endpoint = endpoint;
  GenerateJob common;
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

}  // namespace openai
}  // namespace shardlm
