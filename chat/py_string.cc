#include "chat/py_string.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "tokenizer/utf8.h"

namespace shardlm::jinja::py {
namespace {

constexpr char32_t kReplacement = 0xFFFD;

// Decodes one code point at text[*pos], advancing *pos.
char32_t DecodeOne(std::string_view text, size_t* pos) {
  const auto b0 = static_cast<unsigned char>(text[*pos]);
  if (b0 < 0x80) {
    ++*pos;
    return b0;
  }
  int len = 0;
  char32_t cp = 0;
  char32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    ++*pos;
    return kReplacement;
  }
  if (*pos + len > text.size()) {
    ++*pos;
    return kReplacement;
  }
  for (int i = 1; i < len; ++i) {
    const auto b = static_cast<unsigned char>(text[*pos + i]);
    if ((b & 0xC0) != 0x80) {
      ++*pos;
      return kReplacement;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF) {
    ++*pos;
    return kReplacement;
  }
  *pos += len;
  return cp;
}

bool InChars(char32_t c, const std::u32string& chars) { return chars.find(c) != std::u32string::npos; }

char32_t LowerCp(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c >= 0x100 && c <= 0x137) return c | 1;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c + 1 : c;
  if (c >= 0x14A && c <= 0x177) return c | 1;
  if (c == 0x178) return 0xFF;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  return c;
}

char32_t UpperCp(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  if (c == 0xB5) return 0x39C;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x137) return c & ~char32_t{1};
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c : c - 1;
  if (c >= 0x14A && c <= 0x177) return c & ~char32_t{1};
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x3B1 && c <= 0x3CB) return c - 32;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

void AppendUpper(char32_t c, std::u32string* out) {
  if (c == 0xDF) {  // 'ß'.upper() == 'SS'
    out->append(U"SS");
  } else {
    out->push_back(UpperCp(c));
  }
}

bool IsCased(char32_t c) { return c == 0xDF || LowerCp(c) != c || UpperCp(c) != c; }

bool IsPrintable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  if (c <= 0xA0 || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F)) return false;
  if ((c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF) return false;
  if ((c >= 0xD800 && c <= 0xF8FF) || (c >= 0xFFF9 && c <= 0xFFFB) || c == 0xFFFE || c == 0xFFFF) {
    return false;
  }
  if (c >= 0xE0000) return false;
  return true;
}

}  // namespace

char32_t NextCodePoint(std::string_view text, size_t* pos) { return DecodeOne(text, pos); }

std::u32string Decode(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) out.push_back(DecodeOne(text, &pos));
  return out;
}

void AppendUtf8(char32_t cp, std::string* out) { ::shardlm::AppendUtf8(cp, out); }

std::string Encode(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t c : cps) AppendUtf8(c, &out);
  return out;
}

bool IsAscii(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

bool IsValidUtf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t before = pos;
    if (DecodeOne(text, &pos) == kReplacement && pos == before + 1 &&
        static_cast<unsigned char>(text[before]) >= 0x80) {
      return false;
    }
  }
  return true;
}

int64_t Length(std::string_view text) { return Utf8Length(text); }

bool IsSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool IsLineBreak(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

int64_t ClampIndex(int64_t index, int64_t length) {
  if (index < 0) index += length;
  return std::clamp<int64_t>(index, 0, length);
}

std::vector<int64_t> SliceIndices(int64_t length, std::optional<int64_t> start, std::optional<int64_t> stop,
                                  int64_t step) {
  int64_t lo, hi;
  if (step > 0) {
    lo = start ? ClampIndex(*start, length) : 0;
    hi = stop ? ClampIndex(*stop, length) : length;
  } else {
    auto adjust = [length](int64_t i) {
      if (i < 0) i += length;
      if (i < 0) return int64_t{-1};
      return std::min(i, length - 1);
    };
    lo = start ? adjust(*start) : length - 1;
    hi = stop ? adjust(*stop) : -1;
  }
  std::vector<int64_t> out;
  if (step > 0) {
    for (int64_t i = lo; i < hi; i += step) out.push_back(i);
  } else {
    for (int64_t i = lo; i > hi; i += step) out.push_back(i);
  }
  return out;
}

std::string Strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string cps = Decode(s);
  const std::u32string set = chars ? Decode(*chars) : std::u32string();
  auto strip_this = [&](char32_t c) { return chars ? InChars(c, set) : IsSpace(c); };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip_this(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_this(cps[e - 1])) --e;
  }
  return Encode(std::u32string_view(cps).substr(b, e - b));
}

std::vector<std::string> Split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep) {
    size_t pos = 0;
    while (static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  const std::u32string cps = Decode(s);
  size_t i = 0;
  while (true) {
    while (i < cps.size() && IsSpace(cps[i])) ++i;
    if (i == cps.size()) break;
    if (static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(Encode(std::u32string_view(cps).substr(i)));
      break;
    }
    size_t j = i;
    while (j < cps.size() && !IsSpace(cps[j])) ++j;
    out.push_back(Encode(std::u32string_view(cps).substr(i, j - i)));
    i = j;
  }
  return out;
}

std::vector<std::string> RSplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (maxsplit < 0) return Split(s, sep, maxsplit);
  if (sep) {
    size_t end = s.size();
    while (static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    const std::u32string cps = Decode(s);
    size_t j = cps.size();
    while (true) {
      while (j > 0 && IsSpace(cps[j - 1])) --j;
      if (j == 0) break;
      if (static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(Encode(std::u32string_view(cps).substr(0, j)));
        break;
      }
      size_t i = j;
      while (i > 0 && !IsSpace(cps[i - 1])) --i;
      out.push_back(Encode(std::u32string_view(cps).substr(i, j - i)));
      j = i;
    }
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> SplitLines(std::string_view s, bool keepends) {
  const std::u32string cps = Decode(s);
  std::vector<std::string> out;
  size_t start = 0, i = 0;
  while (i < cps.size()) {
    if (!IsLineBreak(cps[i])) {
      ++i;
      continue;
    }
    size_t eol = i + 1;
    if (cps[i] == '\r' && eol < cps.size() && cps[eol] == '\n') ++eol;
    out.push_back(Encode(std::u32string_view(cps).substr(start, (keepends ? eol : i) - start)));
    start = i = eol;
  }
  if (start < cps.size()) out.push_back(Encode(std::u32string_view(cps).substr(start)));
  return out;
}

std::string Replace(std::string_view s, std::string_view old_text, std::string_view new_text, int64_t count) {
  if (count < 0) count = INT64_MAX;
  std::string out;
  if (old_text.empty()) {
    size_t pos = 0;
    int64_t done = 0;
    while (done < count) {
      out.append(new_text);
      ++done;
      if (pos == s.size()) break;
      const size_t before = pos;
      DecodeOne(s, &pos);
      out.append(s.substr(before, pos - before));
    }
    out.append(s.substr(pos));
    return out;
  }
  size_t pos = 0;
  for (int64_t done = 0; done < count; ++done) {
    const size_t hit = s.find(old_text, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(new_text);
    pos = hit + old_text.size();
  }
  out.append(s.substr(pos));
  return out;
}

int64_t Find(std::string_view s, std::string_view sub, int64_t start, int64_t end, bool reverse) {
  const std::u32string hay = Decode(s);
  const std::u32string needle = Decode(sub);
  const auto len = static_cast<int64_t>(hay.size());
  start = std::clamp<int64_t>(start, 0, len);
  end = std::clamp<int64_t>(end, 0, len);
  if (end - start < static_cast<int64_t>(needle.size())) return -1;
  const std::u32string_view window = std::u32string_view(hay).substr(start, end - start);
  const size_t hit = reverse ? window.rfind(needle) : window.find(needle);
  return hit == std::u32string_view::npos ? -1 : start + static_cast<int64_t>(hit);
}

int64_t Count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return Length(s) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

std::string Upper(std::string_view s) {
  std::u32string out;
  for (char32_t c : Decode(s)) AppendUpper(c, &out);
  return Encode(out);
}

std::string Lower(std::string_view s) {
  std::u32string cps = Decode(s);
  for (char32_t& c : cps) c = LowerCp(c);
  return Encode(cps);
}

std::string SwapCase(std::string_view s) {
  std::u32string out;
  for (char32_t c : Decode(s)) {
    if (IsUpperCased(c)) {
      out.push_back(LowerCp(c));
    } else {
      AppendUpper(c, &out);
    }
  }
  return Encode(out);
}

std::string Capitalize(std::string_view s) {
  std::u32string cps = Decode(s);
  std::u32string out;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (i == 0) {
      AppendUpper(cps[i], &out);
    } else {
      out.push_back(LowerCp(cps[i]));
    }
  }
  return Encode(out);
}

std::string Title(std::string_view s) {
  std::u32string out;
  bool previous_cased = false;
  for (char32_t c : Decode(s)) {
    if (previous_cased) {
      out.push_back(LowerCp(c));
    } else {
      AppendUpper(c, &out);
    }
    previous_cased = IsCased(c);
  }
  return Encode(out);
}

std::string JinjaTitle(std::string_view s) {
  auto is_sep = [](char32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || IsSpace(c);
  };
  std::u32string out;
  bool chunk_start = true;
  bool prev_sep = false;
  bool first = true;
  for (char32_t c : Decode(s)) {
    const bool sep = is_sep(c);
    if (!first && sep != prev_sep) chunk_start = true;
    if (chunk_start) {
      AppendUpper(c, &out);
    } else {
      out.push_back(LowerCp(c));
    }
    chunk_start = false;
    prev_sep = sep;
    first = false;
  }
  return Encode(out);
}

bool IsAlpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (c == 0xAA || c == 0xB5 || c == 0xBA) return true;
  if (c >= 0xC0 && c <= 0x24F) return c != 0xD7 && c != 0xF7;
  return (c >= 0x370 && c <= 0x3FF && c != 0x37E && c != 0x387) || (c >= 0x400 && c <= 0x481) ||
         (c >= 0x48A && c <= 0x52F) || (c >= 0x5D0 && c <= 0x5EA) || (c >= 0x620 && c <= 0x64A) ||
         (c >= 0x3041 && c <= 0x30FF && c != 0x30A0 && c != 0x30FB) || (c >= 0x4E00 && c <= 0x9FFF) ||
         (c >= 0xAC00 && c <= 0xD7A3);
}

bool IsDigit(char32_t c) {
  return (c >= '0' && c <= '9') || c == 0xB2 || c == 0xB3 || c == 0xB9 || (c >= 0x660 && c <= 0x669) ||
         (c >= 0x6F0 && c <= 0x6F9) || (c >= 0x966 && c <= 0x96F) || (c >= 0xFF10 && c <= 0xFF19);
}

bool IsLowerCased(char32_t c) { return c == 0xDF || UpperCp(c) != c; }
bool IsUpperCased(char32_t c) { return LowerCp(c) != c; }

std::string Repr(std::string_view s) {
  const std::u32string cps = Decode(s);
  const bool has_single = cps.find(U'\'') != std::u32string::npos;
  const bool has_double = cps.find(U'"') != std::u32string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  char buf[16];
  for (char32_t c : cps) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out.append("\\n");
    } else if (c == '\r') {
      out.append("\\r");
    } else if (c == '\t') {
      out.append("\\t");
    } else if (IsPrintable(c)) {
      AppendUtf8(c, &out);
    } else {
      if (c <= 0xFF) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      } else if (c <= 0xFFFF) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(c));
      }
      out.append(buf);
    }
  }
  out.push_back(quote);
  return out;
}

std::string FloatRepr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*e", precision - 1, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  // buf is "[-]d[.ddd]e[+-]XX": split it into sign, digits and exponent.
  std::string text(buf);
  std::string sign;
  if (text[0] == '-') {
    sign = "-";
    text.erase(0, 1);
  }
  const size_t e = text.find('e');
  const int exponent = std::atoi(text.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (text[i] != '.') digits.push_back(text[i]);
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  if (exponent < -4 || exponent >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    std::snprintf(buf, sizeof(buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + buf;
  }
  if (exponent < 0) return sign + "0." + std::string(-exponent - 1, '0') + digits;
  const size_t int_digits = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= int_digits) return sign + digits + std::string(int_digits - digits.size(), '0') + ".0";
  return sign + digits.substr(0, int_digits) + "." + digits.substr(int_digits);
}

}  // namespace shardlm::jinja::py
