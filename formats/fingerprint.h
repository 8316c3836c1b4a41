// A model's identity for the coordinator <-> worker handshake: a hash of
// config.json and of every tensor's name, dtype and shape (not the weight
// bytes, so it is cheap). Two directories with the same fingerprint hold the
// same architecture and layout.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace shardlm {

absl::StatusOr<std::string> ModelFingerprint(const std::string& model_dir);

}  // namespace shardlm
