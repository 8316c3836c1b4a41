#include "formats/model_files.h"

#include <filesystem>

#include "common/status.h"
#include "formats/gguf.h"
#include "formats/gguf_model.h"

namespace shardlm {
namespace {

absl::StatusOr<std::string> ReadFromDir(const std::string& dir, const char* file) {
  const std::string path = dir + "/" + file;
  if (!std::filesystem::exists(path)) return absl::NotFoundError("no " + std::string(file) + " in " + dir);
  return ReadFileToString(path);
}

}  // namespace

absl::StatusOr<std::string> ReadTokenizerJson(const std::string& model) {
  if (!IsGgufFile(model)) return ReadFromDir(model, "tokenizer.json");
  SHARDLM_ASSIGN_OR_RETURN(auto file, GgufFile::Open(model));
  return GgufTokenizerJson(file->header(), model);
}

absl::StatusOr<std::string> ReadTokenizerConfigJson(const std::string& model) {
  if (!IsGgufFile(model)) return ReadFromDir(model, "tokenizer_config.json");
  SHARDLM_ASSIGN_OR_RETURN(auto file, GgufFile::Open(model));
  return GgufTokenizerConfigJson(file->header(), model);
}

std::string ModelDisplayName(const std::string& model) {
  std::filesystem::path p(model);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // "dir/" -> "dir"
  std::string name = p.filename().string();
  const std::string ext = ".gguf";
  if (name.size() > ext.size() && name.compare(name.size() - ext.size(), ext.size(), ext) == 0) {
    name.resize(name.size() - ext.size());
  }
  return name;
}

}  // namespace shardlm
