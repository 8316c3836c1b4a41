#include "common/random_token.h"

#include <sys/random.h>

namespace shardlm {

std::string RandomToken(int bytes) {
  std::string raw(static_cast<size_t>(bytes), '\0');
  size_t got = 0;
  while (got < raw.size()) {
    const ssize_t n = getrandom(raw.data() + got, raw.size() - got, 0);
    if (n > 0) got += static_cast<size_t>(n);  // interrupted (EINTR): try again
  }
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(raw.size() * 2);
  for (unsigned char c : raw) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

}  // namespace shardlm
