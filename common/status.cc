#include "common/status.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/cord.h"

namespace shardlm {

namespace {
constexpr char kFieldPayload[] = "type.shardlm.dev/field";
}  // namespace

absl::Status InvalidField(const std::string& field, const std::string& message) {
  return WithField(absl::InvalidArgumentError(field + " " + message), field);
}

absl::Status WithField(absl::Status status, const std::string& field) {
  if (!status.ok() && !field.empty()) status.SetPayload(kFieldPayload, absl::Cord(field));
  return status;
}

std::string ErrorField(const absl::Status& status) {
  const auto field = status.GetPayload(kFieldPayload);  // absl::optional on Debian
  return field ? std::string(*field) : std::string();
}

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
