#include "formats/checkpoint.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "formats/gguf_model.h"
#include "nlohmann/json.hpp"

namespace shardlm {

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  namespace fs = std::filesystem;
  auto ckpt = std::make_unique<Checkpoint>();
  ckpt->dir_ = dir;
  if (IsGgufFile(dir)) {
    SHARDLM_ASSIGN_OR_RETURN(ckpt->gguf_, GgufFile::Open(dir));
    SHARDLM_ASSIGN_OR_RETURN(ckpt->gguf_views_, GgufTensorViews(ckpt->gguf_->header(), dir));
    for (const auto& [name, view] : ckpt->gguf_views_) ckpt->index_[name] = &view;
    return ckpt;
  }
  const std::string single = dir + "/model.safetensors";
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::map<std::string, std::string> expected_file;  // tensor -> file, from the index
  std::vector<std::string> file_names;
  if (fs::exists(index_path)) {
    SHARDLM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index_path));
    auto root = nlohmann::json::parse(text, nullptr, false);
    if (root.is_discarded() || !root.is_object() || !root.contains("weight_map") ||
        !root["weight_map"].is_object()) {
      return absl::InvalidArgumentError(index_path + ": expected a JSON object with 'weight_map'");
    }
    for (auto it = root["weight_map"].begin(); it != root["weight_map"].end(); ++it) {
      if (!it.value().is_string()) {
        return absl::InvalidArgumentError(index_path + ": weight_map['" + it.key() + "'] is not a file name");
      }
      std::string file = it.value().get<std::string>();
      if (file.find('/') != std::string::npos || file == ".." || file.empty()) {
        return absl::InvalidArgumentError(index_path + ": file name '" + file +
                                          "' must be a plain name inside the checkpoint directory");
      }
      expected_file[it.key()] = file;
      if (std::find(file_names.begin(), file_names.end(), file) == file_names.end()) {
        file_names.push_back(file);
      }
    }
  } else if (fs::exists(single)) {
    file_names.push_back("model.safetensors");
  } else {
    return absl::NotFoundError("no model.safetensors or model.safetensors.index.json in " + dir);
  }
  for (const std::string& name : file_names) {
    SHARDLM_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(dir + "/" + name));
    for (const auto& [tensor, view] : file->tensors()) {
      auto exp = expected_file.find(tensor);
      if (!expected_file.empty() && (exp == expected_file.end() || exp->second != name)) {
        continue;  // the index is authoritative: ignore strays
      }
      if (ckpt->index_.count(tensor)) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", tensor, "' appears twice in ", dir));
      }
      ckpt->index_[tensor] = &view;
    }
    ckpt->files_.push_back(std::move(file));
  }
  for (const auto& [tensor, file] : expected_file) {
    if (!ckpt->index_.count(tensor)) {
      return absl::InvalidArgumentError(index_path + ": tensor '" + tensor + "' is not in " + file);
    }
  }
  return ckpt;
}

absl::StatusOr<const TensorView*> Checkpoint::Get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError("tensor '" + name + "' is not in the checkpoint " + dir_);
  }
  return it->second;
}

size_t Checkpoint::TotalBytes() const {
  size_t total = 0;
  for (const auto& [name, view] : index_) total += view->nbytes;
  return total;
}

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  for (const auto& [name, view] : index_) names.push_back(name);
  return names;
}

}  // namespace shardlm
