// A model's chat template: turns OpenAI-style `messages` into the prompt text
// the model was trained on, exactly as Hugging Face transformers'
// tokenizer.apply_chat_template(messages, tools=..., add_generation_prompt=...,
// tokenize=False, **extra) renders it.
//
// The template comes from tokenizer_config.json ("chat_template": a string, or
// a list of {"name", "template"} of which "default" is used, or "tool_use" when
// tools are given), else from chat_template.jinja beside it. The template sees
// what transformers passes: messages, tools (None when not given), documents
// (None), add_generation_prompt, the tokenizer's special tokens (bos_token,
// eos_token, unk_token, pad_token, ..., additional_special_tokens; only those
// set), the caller's extra variables, and the globals raise_exception and
// strftime_now.
//
//   SHARDLM_ASSIGN_OR_RETURN(auto chat, ChatTemplate::Load("/models/Qwen3-8B"));
//   SHARDLM_ASSIGN_OR_RETURN(std::string prompt,
//       chat->Apply(request["messages"], /*add_generation_prompt=*/true, nullptr, nullptr));
//   // The template already wrote BOS when it starts with it: encode without
//   // adding another.
//   bool add_special_tokens = !chat->StartsWithBos(prompt);
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "jinja/jinja.h"
#include "nlohmann/json.hpp"

namespace shardlm {

// Immutable after Load; Apply may run on many threads at once.
class ChatTemplate {
 public:
  // Reads <model_dir>/tokenizer_config.json. NotFound naming the file when it
  // is missing or has no chat template; InvalidArgument when the template
  // does not parse.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> Load(const std::string& model_dir);
  // From the text of a tokenizer_config.json; `label` names it in errors.
  // `fallback_template` is used when the config has no chat_template.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> FromConfig(const std::string& config_json,
                                                                  const std::string& label,
                                                                  const std::string& fallback_template = "");

  // Renders `messages` (a JSON array of message objects). `tools` is a JSON
  // array of tool schemas or null; `extra` an object of further template
  // variables (e.g. {"enable_thinking": false}) or null, where "documents"
  // stands for apply_chat_template's documents argument. `template_name`
  // picks one of several named templates. As in transformers, a message's
  // keys whose value is null are dropped before rendering, and an empty
  // `messages` is InvalidArgument. InvalidArgument for a template error; a
  // template's raise_exception("...") comes back as its message.
  absl::StatusOr<std::string> Apply(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                    const nlohmann::ordered_json& tools, const nlohmann::ordered_json& extra,
                                    const std::string& template_name = "") const;

  // "" when the tokenizer has no BOS token.
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  // True when `rendered` starts with the BOS token (the template wrote it), so
  // the caller must encode it without adding BOS again.
  bool StartsWithBos(const std::string& rendered) const;
  // The names of the templates ("default" for a single template).
  std::vector<std::string> template_names() const;
  // The source of every template, joined: what tool-call formats are read from
  // (coordinator/openai_wire/tool_calls.h).
  const std::string& sources() const { return sources_; }

 private:
  ChatTemplate() = default;

  std::map<std::string, jinja::Template> templates_;
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
  std::string bos_token_;
  std::string eos_token_;
  std::string sources_;
};

}  // namespace shardlm
