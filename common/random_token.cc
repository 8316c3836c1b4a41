#include "common/random_token.h"

#include <sys/random.h>

namespace shardlm {

namespace {

std::string RandomBytes(size_t bytes) {
  std::string raw(bytes, '\0');
  size_t got = 0;
  while (got < raw.size()) {
    const ssize_t n = getrandom(raw.data() + got, raw.size() - got, 0);
    if (n > 0) got += static_cast<size_t>(n);  // interrupted (EINTR): try again
  }
  return raw;
}

}  // namespace

std::string RandomId(const std::string& prefix) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string out = prefix;
  while (out.size() < prefix.size() + 24) {
    // Bytes past 247 (= 4 * 62 - 1) are dropped, so each character is uniform.
    for (unsigned char c : RandomBytes(32)) {
      if (c < 248 && out.size() < prefix.size() + 24) out.push_back(kAlphabet[c % 62]);
    }
  }
  return out;
}

std::string RandomToken(int bytes) {
  const std::string raw = RandomBytes(static_cast<size_t>(bytes));
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
