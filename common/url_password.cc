#include "common/url_password.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace shardlm {

std::string WithoutUrlPassword(const std::string& url) {
  std::string out = url;
  const size_t scheme = out.find("://");
  if (scheme != std::string::npos) {
    const size_t start = scheme + 3;
    const size_t at = out.find('@', start);
    const size_t slash = out.find('/', start);
    if (at != std::string::npos && (slash == std::string::npos || at < slash)) {
      const size_t colon = out.find(':', start);
      if (colon != std::string::npos && colon < at) out.erase(colon, at - colon);
    }
  }
  const size_t query = out.find('?');
  if (query != std::string::npos) {
    std::vector<std::string> kept;
    for (absl::string_view part : absl::StrSplit(out.substr(query + 1), '&')) {
      if (!absl::StartsWith(part, "password=")) kept.emplace_back(part);
    }
    out = absl::StrCat(out.substr(0, query), kept.empty() ? "" : "?", absl::StrJoin(kept, "&"));
  }
  return out;
}

}  // namespace shardlm
