#include "coordinator/openai_wire/params.h"

#include "coordinator/serving/request_limits.h"

namespace shardlm {
namespace openai {

// A client's value as an error message shows it: scalars as JSON (cut
// short), lists and objects by kind only.
std::string Shown(const Json& v) {
  if (v.is_structured()) return v.is_array() ? "a list" : "an object";
  std::string text = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 64) text = text.substr(0, 61) + "...";
  return text;
}

std::optional<std::vector<int32_t>> Params::Encode(const std::string& field, const std::string& text,
                                                   const ModelContext& model, bool add_special_tokens) {
  auto ids = EncodeField(*model.tokenizer, text, add_special_tokens, model.max_context, field, stop_);
  if (!ids.ok()) {
    Fail(field, std::string(ids.status().message()));
    return std::nullopt;
  }
  return std::move(*ids);
}

const std::string* StringParam(Params& p, const std::string& key) {
  if (!p.Has(key)) return nullptr;
  if (!p.At(key).is_string()) {
    p.Fail(key, absl::StrCat(key, " must be a string"));
    return nullptr;
  }
  return &p.At(key).get_ref<const std::string&>();
}

}  // namespace openai
}  // namespace shardlm
