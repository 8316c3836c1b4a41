#include "chat/chat_template.h"

#include <fstream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "formats/gguf.h"
#include "formats/model_files.h"

namespace shardlm {
namespace {

// transformers' SPECIAL_TOKENS_ATTRIBUTES, which apply_chat_template passes
// to the template (those that are set).
constexpr const char* kSpecialTokens[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                          "pad_token", "cls_token", "mask_token"};

// A token in tokenizer_config.json: "text" or an AddedToken {"content": "text", ...}.
std::optional<std::string> TokenText(const nlohmann::ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::Load(const std::string& model_dir) {
  if (IsGgufFile(model_dir)) {
    SHARDLM_ASSIGN_OR_RETURN(std::string config, ReadTokenizerConfigJson(model_dir));
    return FromConfig(config, model_dir);
  }
  const std::string path = model_dir + "/tokenizer_config.json";
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return absl::NotFoundError(absl::StrCat("no chat template: ", text.status().message()));
  // Newer checkpoints keep the template in its own file.
  std::string fallback;
  if (std::ifstream(model_dir + "/chat_template.jinja")) {
    SHARDLM_ASSIGN_OR_RETURN(fallback, ReadFileToString(model_dir + "/chat_template.jinja"));
  }
  return FromConfig(*text, path, fallback);
}

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::FromConfig(const std::string& config_json,
                                                                       const std::string& label,
                                                                       const std::string& fallback_template) {
  nlohmann::ordered_json config;
  try {
    config = nlohmann::ordered_json::parse(config_json);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(label, " is not valid JSON: ", e.what()));
  }
  if (!config.is_object()) return absl::InvalidArgumentError(label + " is not a JSON object");

  std::map<std::string, std::string> sources;
  const nlohmann::ordered_json* spec = config.contains("chat_template") ? &config["chat_template"] : nullptr;
  if (spec != nullptr && spec->is_string()) {
    sources["default"] = spec->get<std::string>();
  } else if (spec != nullptr && spec->is_array()) {
    for (const auto& entry : *spec) {
      if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
          !entry.contains("template") || !entry["template"].is_string()) {
        return absl::InvalidArgumentError(label +
                                          ": chat_template entries must be {\"name\", \"template\"} strings");
      }
      sources[entry["name"].get<std::string>()] = entry["template"].get<std::string>();
    }
  } else if (spec != nullptr && !spec->is_null()) {
    return absl::InvalidArgumentError(label + ": chat_template must be a string or a list");
  }
  if (sources.empty() && !fallback_template.empty()) sources["default"] = fallback_template;
  if (sources.empty()) return absl::NotFoundError(label + " has no chat_template");

  auto chat = std::unique_ptr<ChatTemplate>(new ChatTemplate());
  for (const auto& [name, source] : sources) {
    absl::StatusOr<jinja::Template> t = jinja::Template::Parse(source, jinja::Options::HuggingFace());
    if (!t.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("chat template '", name, "' of ", label, ": ", t.status().message()));
    }
    chat->templates_.emplace(name, std::move(*t));
    chat->sources_ += source;
  }
  for (const char* key : kSpecialTokens) {
    if (!config.contains(key)) continue;
    std::optional<std::string> token = TokenText(config[key]);
    if (token && !token->empty()) chat->special_tokens_[key] = *token;
  }
  if (config.contains("additional_special_tokens") && config["additional_special_tokens"].is_array()) {
    nlohmann::ordered_json extra = nlohmann::ordered_json::array();
    for (const auto& t : config["additional_special_tokens"]) {
      if (std::optional<std::string> token = TokenText(t)) extra.push_back(*token);
    }
    if (!extra.empty()) chat->special_tokens_["additional_special_tokens"] = std::move(extra);
  }
  chat->bos_token_ = chat->special_tokens_.value("bos_token", "");
  chat->eos_token_ = chat->special_tokens_.value("eos_token", "");
  return chat;
}

absl::StatusOr<std::string> ChatTemplate::Apply(const nlohmann::ordered_json& messages,
                                                bool add_generation_prompt,
                                                const nlohmann::ordered_json& tools,
                                                const nlohmann::ordered_json& extra,
                                                const std::string& template_name) const {
  if (!messages.is_array()) return absl::InvalidArgumentError("messages must be a JSON array");
  if (messages.empty()) return absl::InvalidArgumentError("messages must hold at least one message");
  if (!extra.is_null() && !extra.is_object())
    return absl::InvalidArgumentError("extra template variables must be a JSON object");

  // transformers' choice among named templates.
  std::string name = template_name;
  if (name.empty()) name = (!tools.is_null() && templates_.count("tool_use")) ? "tool_use" : "default";
  auto it = templates_.find(name);
  if (it == templates_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("the tokenizer has no chat template named '", name, "'"));
  }

  nlohmann::ordered_json context = special_tokens_;
  context["documents"] = nullptr;
  if (extra.is_object()) {
    for (const auto& [key, value] : extra.items()) {
      if (key == "messages" || key == "tools" || key == "add_generation_prompt") {
        return absl::InvalidArgumentError("extra template variable '" + key + "' would replace an argument");
      }
      context[key] = value;  // "documents" is apply_chat_template's documents=
    }
  }
  // As transformers does: a message's keys whose value is null are dropped, since
  // templates handle a missing key but render a null one as "None".
  nlohmann::ordered_json normalized = nlohmann::ordered_json::array();
  for (const auto& message : messages) {
    if (!message.is_object()) {
      normalized.push_back(message);
      continue;
    }
    nlohmann::ordered_json kept = nlohmann::ordered_json::object();
    for (const auto& [key, value] : message.items()) {
      if (!value.is_null()) kept[key] = value;
    }
    normalized.push_back(std::move(kept));
  }
  context["messages"] = std::move(normalized);
  context["tools"] = tools;
  context["add_generation_prompt"] = add_generation_prompt;
  return it->second.Render(context);
}

bool ChatTemplate::StartsWithBos(const std::string& rendered) const {
  return !bos_token_.empty() && rendered.compare(0, bos_token_.size(), bos_token_) == 0;
}

std::vector<std::string> ChatTemplate::template_names() const {
  std::vector<std::string> names;
  for (const auto& [name, t] : templates_) names.push_back(name);
  return names;
}

}  // namespace shardlm
