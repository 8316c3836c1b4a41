// A model's weights: a Hugging Face checkpoint directory (one model.safetensors,
// or a sharded set described by model.safetensors.index.json ({"weight_map":
// {"tensor name": "model-00001-of-00002.safetensors", ...}})), or one GGUF file,
// whose tensors appear under their Hugging Face names (formats/gguf_model.h).
//
//   SHARDLM_ASSIGN_OR_RETURN(auto ckpt, Checkpoint::Open(dir));
//   SHARDLM_ASSIGN_OR_RETURN(const TensorView* w, ckpt->Get("model.norm.weight"));
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"

namespace shardlm {

class Checkpoint {
 public:
  // `path`: a checkpoint directory or a .gguf file.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& path);

  // NotFound naming the tensor and the checkpoint when absent.
  absl::StatusOr<const TensorView*> Get(const std::string& name) const;
  bool Has(const std::string& name) const { return index_.count(name) > 0; }
  const std::string& dir() const { return dir_; }
  // The parsed GGUF file (its metadata), or nullptr for a checkpoint directory.
  const GgufHeader* gguf_header() const { return gguf_ ? &gguf_->header() : nullptr; }
  // Total bytes of all tensors.
  size_t TotalBytes() const;
  std::vector<std::string> TensorNames() const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unique_ptr<GgufFile> gguf_;
  std::map<std::string, TensorView> gguf_views_;  // the GGUF's tensors under Hugging Face names
  std::map<std::string, const TensorView*> index_;
};

}  // namespace shardlm
