#include "formats/fingerprint.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "formats/checkpoint.h"
#include "formats/gguf_model.h"

namespace shardlm {
namespace {

// FNV-1a, 64 bit.
void Mix(uint64_t* h, const std::string& bytes) {
  for (unsigned char c : bytes) {
    *h ^= c;
    *h *= 0x100000001b3ull;
  }
  *h ^= 0xff;  // field separator
  *h *= 0x100000001b3ull;
}

}  // namespace

absl::StatusOr<std::string> ModelFingerprint(const std::string& dir) {
  SHARDLM_ASSIGN_OR_RETURN(auto ckpt, Checkpoint::Open(dir));
  // A GGUF's config is in the metadata the checkpoint has already parsed.
  std::string config;
  if (const GgufHeader* gguf = ckpt->gguf_header()) {
    SHARDLM_ASSIGN_OR_RETURN(config, GgufConfigJson(*gguf, dir));
  } else {
    SHARDLM_ASSIGN_OR_RETURN(config, ReadFileToString(dir + "/config.json"));
  }
  uint64_t h = 0xcbf29ce484222325ull;
  Mix(&h, config);
  for (const std::string& name : ckpt->TensorNames()) {  // sorted
    SHARDLM_ASSIGN_OR_RETURN(const TensorView* v, ckpt->Get(name));
    std::string desc =
        name + ":" + (v->block == BlockFormat::kNone ? DTypeName(v->dtype) : BlockFormatName(v->block));
    for (int64_t d : v->shape) absl::StrAppend(&desc, ",", d);
    Mix(&h, desc);
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return std::string(hex);
}

}  // namespace shardlm
