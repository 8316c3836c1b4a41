#include "jinja/py_string.h"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/utf8.h"

namespace shardlm::jinja::py {
namespace {

bool InChars(char32_t c, const std::u32string& chars) { return chars.find(c) != std::u32string::npos; }

// Python's case mappings are Unicode's full ones, language-insensitive: ICU's
// with the root locale. Whole strings go through ICU at once, so context
// (a final sigma) is seen as Python sees it.
const icu::Locale& Root() { return icu::Locale::getRoot(); }

icu::UnicodeString Utf16(std::string_view s) {
  return icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
}

std::string ToUtf8(const icu::UnicodeString& u) {
  std::string out;
  u.toUTF8String(out);
  return out;
}

icu::UnicodeString One(char32_t c) { return icu::UnicodeString(static_cast<UChar32>(c)); }

std::string LowerOf(char32_t c) { return ToUtf8(One(c).toLower(Root())); }
std::string UpperOf(char32_t c) { return ToUtf8(One(c).toUpper(Root())); }
// Titlecase of one character ('ß' -> "Ss", 'ǆ' -> "ǅ").
std::string TitleOf(char32_t c) {
  return ToUtf8(One(c).toTitle(nullptr, Root(), U_TITLECASE_NO_LOWERCASE | U_TITLECASE_NO_BREAK_ADJUSTMENT));
}

bool IsCased(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED); }

// Python's str.isprintable: not Other (Cc, Cf, Cs, Co, Cn) nor Separator
// (Zl, Zp, Zs) except the space itself.
bool IsPrintable(char32_t c) {
  if (c == ' ') return true;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

}  // namespace

char32_t NextCodePoint(std::string_view text, size_t* pos) { return ::shardlm::NextCodePoint(text, pos); }

std::u32string Decode(std::string_view text) { return DecodeUtf32(text); }

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

bool IsValidUtf8(std::string_view text) { return ::shardlm::IsValidUtf8(text); }

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
      NextCodePoint(s, &pos);
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

std::string Upper(std::string_view s) { return ToUtf8(Utf16(s).toUpper(Root())); }

std::string Lower(std::string_view s) { return ToUtf8(Utf16(s).toLower(Root())); }

std::string SwapCase(std::string_view s) {
  std::string out;
  for (char32_t c : Decode(s)) {
    if (IsUpperCased(c)) {
      out += LowerOf(c);
    } else if (IsLowerCased(c)) {
      out += UpperOf(c);
    } else {
      AppendUtf8(c, &out);
    }
  }
  return out;
}

// Python 3.8+: the first character titlecased, the rest lowercased.
std::string Capitalize(std::string_view s) {
  if (s.empty()) return "";
  size_t pos = 0;
  const char32_t first = NextCodePoint(s, &pos);
  return TitleOf(first) + Lower(s.substr(pos));
}

std::string Title(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (char32_t c : Decode(s)) {
    out += previous_cased ? LowerOf(c) : TitleOf(c);
    previous_cased = IsCased(c);
  }
  return out;
}

std::string JinjaTitle(std::string_view s) {
  auto is_sep = [](char32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || IsSpace(c);
  };
  std::string out;
  bool chunk_start = true;
  bool prev_sep = false;
  bool first = true;
  for (char32_t c : Decode(s)) {
    const bool sep = is_sep(c);
    if (!first && sep != prev_sep) chunk_start = true;
    out += chunk_start ? UpperOf(c) : LowerOf(c);
    chunk_start = false;
    prev_sep = sep;
    first = false;
  }
  return out;
}

// Python's str.isalpha: letters (Lu, Ll, Lt, Lm, Lo).
bool IsAlpha(char32_t c) {
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return true;
    default:
      return false;
  }
}

// Python's str.isdigit: Numeric_Type Decimal or Digit.
bool IsDigit(char32_t c) {
  const int type = u_getIntPropertyValue(static_cast<UChar32>(c), UCHAR_NUMERIC_TYPE);
  return type == U_NT_DECIMAL || type == U_NT_DIGIT;
}

bool IsLowerCased(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_LOWERCASE); }
bool IsUpperCased(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_UPPERCASE); }

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
