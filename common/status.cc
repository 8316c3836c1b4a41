#include "common/status.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace shardlm {

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError("cannot open " + path + ": " + std::strerror(errno));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::InternalError("cannot read " + path);
  return ss.str();
}

absl::Status WriteStringToFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::PermissionDeniedError("cannot write " + path + ": " + std::strerror(errno));
  }
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!out) return absl::InternalError("short write to " + path);
  return absl::OkStatus();
}

}  // namespace shardlm
