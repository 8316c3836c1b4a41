#include "common/utf8.h"

#include <cstdint>

namespace shardlm {
namespace {

// Valid range of the second byte after lead byte `lead` (Unicode Table 3-7).
void SecondByteRange(uint8_t lead, uint8_t* lo, uint8_t* hi) {
  *lo = 0x80;
  *hi = 0xBF;
  if (lead == 0xE0) *lo = 0xA0;
  if (lead == 0xED) *hi = 0x9F;
  if (lead == 0xF0) *lo = 0x90;
  if (lead == 0xF4) *hi = 0x8F;
}

int SequenceLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;  // invalid lead
}

// The sequence starting at bytes[i]: its expected length (0: invalid lead),
// how many of its bytes are valid so far, and whether a byte broke it (as
// opposed to the text ending first).
struct Sequence {
  int len = 0;
  int valid = 0;
  bool broken = false;
};

Sequence Scan(std::string_view bytes, size_t i) {
  const uint8_t lead = static_cast<uint8_t>(bytes[i]);
  Sequence s;
  s.len = SequenceLength(lead);
  s.valid = 1;
  for (int k = 1; k < s.len; ++k) {
    if (i + k >= bytes.size()) break;
    const uint8_t b = static_cast<uint8_t>(bytes[i + k]);
    uint8_t lo = 0x80, hi = 0xBF;
    if (k == 1) SecondByteRange(lead, &lo, &hi);
    if (b < lo || b > hi) {
      s.broken = true;
      break;
    }
    ++s.valid;
  }
  return s;
}

}  // namespace

char32_t NextCodePoint(std::string_view text, size_t* pos) {
  const size_t i = *pos;
  const Sequence s = Scan(text, i);
  if (s.len == 0 || s.valid < s.len) {
    *pos += s.valid;  // an invalid lead, or the maximal subpart of a broken or cut sequence
    return 0xFFFD;
  }
  const uint8_t lead = static_cast<uint8_t>(text[i]);
  char32_t cp = s.len == 1 ? lead : s.len == 2 ? (lead & 0x1F) : s.len == 3 ? (lead & 0x0F) : (lead & 0x07);
  for (int k = 1; k < s.len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(text[i + k]) & 0x3F);
  *pos += s.len;
  return cp;
}

std::u32string DecodeUtf32(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) out.push_back(NextCodePoint(text, &pos));
  return out;
}

int64_t Utf8Length(std::string_view s) {
  int64_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t DecodeUtf8Lossy(std::string_view bytes, bool final, std::string* out) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  size_t i = 0;
  const size_t n = bytes.size();
  while (i < n) {
    const Sequence s = Scan(bytes, i);
    if (s.len != 0 && s.valid == s.len) {
      out->append(bytes.substr(i, s.len));
      i += s.len;
    } else if (s.len != 0 && !s.broken && !final) {
      return i;  // incomplete tail: wait for more bytes
    } else {
      out->append(kReplacement);  // an invalid lead, or a maximal subpart, replaced once
      i += s.valid;
    }
  }
  return i;
}

bool IsValidUtf8(std::string_view s) {
  std::string scratch;
  scratch.reserve(s.size());
  DecodeUtf8Lossy(s, /*final=*/true, &scratch);
  return scratch == s;
}

}  // namespace shardlm
