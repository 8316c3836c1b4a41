#include "common/tls_files.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace shardlm {

absl::StatusOr<std::string> ReadSecretFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(what, ": cannot read '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string data = ss.str();
  if (data.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": '", path, "' is empty"));
  return data;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path, const std::string& what) {
  auto token = ReadSecretFile(path, what);
  if (!token.ok()) return token.status();
  const size_t end = token->find_last_not_of(" \r\n\t");
  if (end == std::string::npos)
    return absl::InvalidArgumentError(what + ": '" + path + "' holds only blanks");
  return token->substr(0, end + 1);
}

}  // namespace shardlm
