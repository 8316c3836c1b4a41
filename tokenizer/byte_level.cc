#include "tokenizer/byte_level.h"

#include "common/utf8.h"

namespace shardlm {

const ByteLevelTable& ByteLevelTable::Get() {
  static const ByteLevelTable* table = new ByteLevelTable();
  return *table;
}

ByteLevelTable::ByteLevelTable() {
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = printable(b) ? static_cast<char32_t>(b) : next++;
    AppendUtf8(cp, &byte_to_utf8_[b]);
    cp_to_byte_[cp] = static_cast<unsigned char>(b);
  }
}

bool ByteLevelTable::Decode(std::string_view s, std::string* bytes) const {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    char32_t cp;
    int len;
    if (c < 0x80) {
      cp = c;
      len = 1;
    } else if ((c >> 5) == 0x6 && i + 1 < s.size()) {
      cp = ((c & 0x1F) << 6) | (s[i + 1] & 0x3F);
      len = 2;
    } else {
      return false;  // the table only uses code points below U+0800
    }
    auto it = cp_to_byte_.find(cp);
    if (it == cp_to_byte_.end()) return false;
    bytes->push_back(static_cast<char>(it->second));
    i += len;
  }
  return true;
}

}  // namespace shardlm
