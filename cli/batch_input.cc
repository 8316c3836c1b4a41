#include "cli/batch_input.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "coordinator/serving/request_limits.h"
#include "nlohmann/json.hpp"

namespace shardlm {

namespace {

using json = nlohmann::json;

absl::Status Bad(const std::string& key, const std::string& what, const json& got) {
  return absl::InvalidArgumentError(absl::StrCat("\"", key, "\" must be ", what, ", got ",
                                                 got.dump(-1, ' ', false, json::error_handler_t::replace)));
}

bool IsInt32(const json& v) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= static_cast<uint64_t>(INT32_MAX);
  const int64_t x = v.get<int64_t>();
  return x >= INT32_MIN && x <= INT32_MAX;
}

absl::Status GetInt32(const json& v, const std::string& key, int32_t* out) {
  if (!IsInt32(v)) return Bad(key, "an integer in [-2^31, 2^31)", v);
  *out = v.get<int32_t>();
  return absl::OkStatus();
}

absl::Status GetFloat(const json& v, const std::string& key, float* out) {
  if (!v.is_number()) return Bad(key, "a number", v);
  *out = v.get<float>();
  return absl::OkStatus();
}

absl::Status GetIds(const json& v, const std::string& key, std::vector<int32_t>* out) {
  if (!v.is_array()) return Bad(key, "a list of token ids", v);
  out->clear();
  for (size_t i = 0; i < v.size(); ++i) {
    if (!IsInt32(v[i])) return Bad(absl::StrCat(key, "[", i, "]"), "an integer token id", v[i]);
    out->push_back(v[i].get<int32_t>());
  }
  return absl::OkStatus();
}

absl::Status GetStops(const json& v, std::vector<std::string>* out) {
  if (v.is_string()) {
    out->push_back(v.get<std::string>());
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) return Bad(absl::StrCat("stop[", i, "]"), "a string", v[i]);
      out->push_back(v[i].get<std::string>());
    }
  } else {
    return Bad("stop", "a list of strings", v);
  }
  // The API's limits, with its messages.
  if (out->size() > static_cast<size_t>(kMaxStopStrings)) {
    return absl::InvalidArgumentError(
        absl::StrCat("stop holds at most ", kMaxStopStrings, " strings, got ", out->size()));
  }
  for (size_t i = 0; i < out->size(); ++i) {
    if ((*out)[i].empty() || (*out)[i].size() > static_cast<size_t>(kMaxStopStringBytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop[", i, "] must be 1 to ", kMaxStopStringBytes, " bytes"));
    }
  }
  return absl::OkStatus();
}

// The line's constraint: at most one of its keys (ConstraintSpec's kinds).
absl::StatusOr<ConstraintSpec> GetConstraint(const json& in) {
  using Kind = ConstraintSpec::Kind;
  ConstraintSpec spec;
  for (const char* key : {"json_schema", "json_object", "regex", "grammar", "choice"}) {
    if (!in.contains(key) || in[key].is_null()) continue;
    if (std::string(key) == "json_object" && in[key].is_boolean() && !in[key].get<bool>())
      continue;  // asks for none
    if (!spec.empty()) {
      return absl::InvalidArgumentError(
          "give at most one of \"json_schema\", \"json_object\", \"regex\", \"grammar\" and \"choice\"");
    }
    const json& v = in[key];
    const std::string k = key;
    if (k == "json_schema") {
      if (!v.is_object() && !v.is_boolean() && !v.is_string())
        return Bad(key, "a JSON Schema (an object)", v);
      spec.kind = Kind::kJsonSchema;
      spec.text = v.is_string() ? v.get<std::string>() : v.dump();
    } else if (k == "json_object") {
      if (!v.is_boolean()) return Bad(key, "true or false", v);
      if (v.get<bool>()) spec.kind = Kind::kJsonObject;
    } else if (k == "regex" || k == "grammar") {
      if (!v.is_string() || v.get<std::string>().empty()) return Bad(key, "a non-empty string", v);
      spec.kind = k == "regex" ? Kind::kRegex : Kind::kGrammar;
      spec.text = v.get<std::string>();
    } else {
      if (!v.is_array() || v.empty()) return Bad(key, "a non-empty list of strings", v);
      for (const json& c : v) {
        if (!c.is_string()) return Bad(key, "a non-empty list of strings", v);
        spec.choices.push_back(c.get<std::string>());
      }
      spec.kind = Kind::kChoice;
    }
  }
  return spec;
}

}  // namespace

const std::vector<std::string>& BatchLineKeys() {
  static const std::vector<std::string> keys = {"prompt",
                                                "prompt_ids",
                                                "max_new_tokens",
                                                "ignore_eos",
                                                "stop",
                                                "stop_token_ids",
                                                "temperature",
                                                "top_p",
                                                "top_k",
                                                "min_p",
                                                "seed",
                                                "repetition_penalty",
                                                "presence_penalty",
                                                "frequency_penalty",
                                                "json_schema",
                                                "json_object",
                                                "regex",
                                                "grammar",
                                                "choice"};
  return keys;
}

absl::StatusOr<BatchItem> ParseBatchLine(const std::string& line) {
  json in;
  try {
    in = json::parse(line);
  } catch (const json::exception&) {
    return absl::InvalidArgumentError("not a JSON object");
  }
  if (!in.is_object()) {
    return absl::InvalidArgumentError("not a JSON object: " +
                                      in.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 80));
  }
  const auto& keys = BatchLineKeys();
  for (const auto& [key, value] : in.items()) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown key \"", key, "\" (known: ", absl::StrJoin(keys, ", "), ")"));
    }
  }
  auto has = [&](const char* key) { return in.contains(key) && !in[key].is_null(); };
  BatchItem item;
  EngineRequest& r = item.request;
  if (has("prompt") == has("prompt_ids")) {
    return absl::InvalidArgumentError("give exactly one of \"prompt\" (text) or \"prompt_ids\" (token ids)");
  }
  if (has("prompt")) {
    const json& p = in["prompt"];
    if (!p.is_string() || p.get<std::string>().empty()) return Bad("prompt", "a non-empty string", p);
    item.is_text = true;
    item.text = p.get<std::string>();
  } else {
    absl::Status st = GetIds(in["prompt_ids"], "prompt_ids", &r.prompt);
    if (!st.ok()) return st;
    if (r.prompt.empty()) return Bad("prompt_ids", "a non-empty list of token ids", in["prompt_ids"]);
  }
  r.max_new_tokens = 16;
  absl::Status st;
  if (st.ok() && has("max_new_tokens"))
    st = GetInt32(in["max_new_tokens"], "max_new_tokens", &r.max_new_tokens);
  if (st.ok() && has("ignore_eos")) {
    if (!in["ignore_eos"].is_boolean()) return Bad("ignore_eos", "true or false", in["ignore_eos"]);
    r.ignore_eos = in["ignore_eos"].get<bool>();
  }
  if (st.ok() && has("stop")) st = GetStops(in["stop"], &item.stop);
  if (st.ok() && has("stop_token_ids"))
    st = GetIds(in["stop_token_ids"], "stop_token_ids", &r.stop_token_ids);
  SamplingParams& s = r.sampling;
  if (st.ok() && has("temperature")) st = GetFloat(in["temperature"], "temperature", &s.temperature);
  if (st.ok() && has("top_p")) st = GetFloat(in["top_p"], "top_p", &s.top_p);
  if (st.ok() && has("top_k")) st = GetInt32(in["top_k"], "top_k", &s.top_k);
  if (st.ok() && has("min_p")) st = GetFloat(in["min_p"], "min_p", &s.min_p);
  if (st.ok() && has("repetition_penalty")) {
    st = GetFloat(in["repetition_penalty"], "repetition_penalty", &s.repetition_penalty);
  }
  if (st.ok() && has("presence_penalty")) {
    st = GetFloat(in["presence_penalty"], "presence_penalty", &s.presence_penalty);
  }
  if (st.ok() && has("frequency_penalty")) {
    st = GetFloat(in["frequency_penalty"], "frequency_penalty", &s.frequency_penalty);
  }
  if (st.ok() && has("seed")) {
    const json& v = in["seed"];
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0)) {
      return Bad("seed", "an integer in [0, 2^64)", v);
    }
    r.has_seed = true;
    s.seed = v.get<uint64_t>();
  }
  if (!st.ok()) return st;
  SHARDLM_ASSIGN_OR_RETURN(item.constraint, GetConstraint(in));
  return item;
}

}  // namespace shardlm
