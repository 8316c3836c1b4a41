// GPT-2's byte <-> code point table used by byte-level BPE: printable bytes
// map to themselves, the others to U+0100 and up, so every byte string has a
// printable, whitespace-free spelling ("Ġ" for space, "Ċ" for newline).
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <unordered_map>

namespace shardlm {

class ByteLevelTable {
 public:
  static const ByteLevelTable& Get();
  // UTF-8 spelling of each byte.
  const std::string& Encode(unsigned char b) const { return byte_to_utf8_[b]; }
  // Bytes of a byte-level string; false if it holds a code point outside the table.
  bool Decode(std::string_view spelled, std::string* bytes) const;

 private:
  ByteLevelTable();
  std::array<std::string, 256> byte_to_utf8_;
  std::unordered_map<char32_t, unsigned char> cp_to_byte_;
};

}  // namespace shardlm
