// The checking of an OpenAI request body's parameters, for every OpenAI
// endpoint (coordinator/openai/ and coordinator/stateful/): the first error
// wins and names its parameter and the limit, as OpenAI's do.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/openai_wire/api_error.h"
#include "coordinator/openai_wire/model_context.h"
#include "step/sampling_limits.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {
namespace openai {

// A client's value as an error message shows it: scalars as JSON (cut
// short), lists and objects by kind only.
std::string Shown(const Json& v);

// Checks a body's parameters; the first error wins and names its parameter.
class Params {
 public:
  Params(const Json& body, ApiError* error, const Tokenizer::StopCheck& stop)
      : body_(body), error_(error), stop_(stop) {}

  // Tokenizes `text` (the value of `field`): refused before tokenizing when it is
  // longer than the context could hold; stops when the client has gone.
  std::optional<std::vector<int32_t>> Encode(const std::string& field, const std::string& text,
                                             const ModelContext& model, bool add_special_tokens);

  bool Fail(const std::string& param, const std::string& message) {
    if (!failed_) {
      failed_ = true;
      *error_ = ApiError{400, message, "invalid_request_error", param, ""};
    }
    return false;
  }
  bool failed() const { return failed_; }
  // Says when the client has gone (tokenizing stops).
  const Tokenizer::StopCheck& stop() const { return stop_; }
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

// A string parameter, or a failure naming it.
const std::string* StringParam(Params& p, const std::string& key);

}  // namespace openai
}  // namespace shardlm
