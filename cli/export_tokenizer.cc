// shardlm export-tokenizer: the tokenizer a model is served with, as the two files
// Hugging Face tokenizers and routers load (tokenizer.json, tokenizer_config.json with the chat
// template), for any model shardlm serves. For a GGUF file they are the ones shardlm builds from
// its tokenizer.ggml.* and tokenizer.chat_template keys (formats/gguf_model.h); for a model
// directory, its own. SGLang's model gateway loads them from the directory serve reports as
// model_path (serve --router-model-path; docs/routers.md).
//
//   shardlm export-tokenizer --model SmolLM2-135M-Instruct.Q4_1.gguf --out /models/smollm2-tokenizer
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/status.h"
#include "formats/model_files.h"
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer.h"

namespace shardlm {
namespace {

using json = nlohmann::json;

// The template file that goes into tokenizer_config.json, if any: --chat-template's, else a
// model directory's chat_template.jinja when its config holds none (as serve reads it).
std::optional<std::string> TemplateFile(const std::string& model, const json& config,
                                        const std::optional<std::string>& flag) {
  if (flag) return flag;
  const std::string jinja = model + "/chat_template.jinja";
  if (!config.contains("chat_template") && std::filesystem::is_regular_file(jinja)) return jinja;
  return std::nullopt;
}

// tokenizer_config.json's text: the model's (an empty object when it has none), with the
// template of TemplateFile in it.
absl::StatusOr<std::string> ConfigText(const std::string& model,
                                       const std::optional<std::string>& template_flag) {
  auto text = ReadTokenizerConfigJson(model);
  if (!text.ok() && !absl::IsNotFound(text.status())) return text.status();
  json config = text.ok() ? json::parse(*text, nullptr, false) : json::object();
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError(model + ": tokenizer_config.json is not a JSON object");
  }
  const std::optional<std::string> file = TemplateFile(model, config, template_flag);
  if (!file) return text.ok() ? *text : std::string("{}\n");
  SHARDLM_ASSIGN_OR_RETURN(config["chat_template"], ReadFileToString(*file));
  return config.dump(2) + "\n";
}

absl::Status Export(const std::string& model, const std::string& out,
                    const std::optional<std::string>& template_file) {
  SHARDLM_ASSIGN_OR_RETURN(std::string tokenizer, ReadTokenizerJson(model));
  // Written only if shardlm itself loads it: the files say what the engine uses.
  SHARDLM_ASSIGN_OR_RETURN(auto loaded, Tokenizer::FromJson(tokenizer, model));
  SHARDLM_ASSIGN_OR_RETURN(std::string config, ConfigText(model, template_file));
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat("--out: cannot make ", out, ": ", ec.message()));
  SHARDLM_RETURN_IF_ERROR(WriteStringToFile(out + "/tokenizer.json", tokenizer));
  SHARDLM_RETURN_IF_ERROR(WriteStringToFile(out + "/tokenizer_config.json", config));
  std::printf("wrote %s/tokenizer.json (%d tokens) and %s/tokenizer_config.json\n", out.c_str(),
              loaded->vocab_size(), out.c_str());
  return absl::OkStatus();
}

}  // namespace

int RunExportTokenizer(int argc, char** argv, const CliEnv& /*env*/) {
  std::string model, out;
  std::optional<std::string> chat_template;
  FlagSet f("export-tokenizer");
  f.String("model", "a model directory or GGUF file", true).To(&model);
  f.String("out", "the directory to write tokenizer.json and tokenizer_config.json into", true).To(&out);
  f.String("chat-template", "a Jinja chat template file written instead of the model's").To(&chat_template);
  int code = 0;
  if (!ParseCommandLine(f, argc, argv, 0, &code)) return code;
  absl::Status st = Export(model, out, chat_template);
  return st.ok() ? 0 : Fail(st);
}

}  // namespace shardlm
