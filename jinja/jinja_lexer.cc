#include "jinja/jinja_lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <optional>

#include "absl/strings/str_cat.h"
#include "jinja/py_string.h"

namespace shardlm::jinja {
namespace {

bool IsDigitChar(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigitChar(c); }
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& options) : src_(std::move(source)), options_(options) {
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') newlines_.push_back(i);
    }
  }

  absl::StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;
    const size_t n = src_.size();
    while (pos < n) {
      const size_t tag = FindTagStart(pos);
      if (tag == std::string::npos) {
        Emit(TokenType::kData, src_.substr(pos), pos);
        break;
      }
      const char kind = src_[tag + 1];
      size_t p = tag + 2;
      char sign = 0;
      if (p < n && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      const size_t raw_body = kind == '%' ? MatchRawBegin(p) : std::string::npos;
      std::string text = src_.substr(pos, tag - pos);
      StripBeforeTag(&text, sign, /*is_variable=*/kind == '{', line_starting);
      if (!text.empty()) Emit(TokenType::kData, std::move(text), pos);

      if (kind == '#') {
        const size_t close = src_.find("#}", p);
        if (close == std::string::npos) return Error(tag, "missing end of comment tag '#}'");
        char end_sign = 0;
        if (close > p && (src_[close - 1] == '-' || src_[close - 1] == '+')) end_sign = src_[close - 1];
        pos = AfterTagEnd(close + 2, end_sign, /*trim=*/true);
      } else if (raw_body != std::string::npos) {
        absl::StatusOr<size_t> after = LexRaw(tag, raw_body, src_[raw_body - 1] == '\n');
        if (!after.ok()) return after.status();
        pos = *after;
      } else {
        Emit(kind == '%' ? TokenType::kBlockBegin : TokenType::kVariableBegin, "", tag);
        absl::StatusOr<size_t> after = LexTag(/*block=*/kind == '%', tag, p);
        if (!after.ok()) return after.status();
        pos = *after;
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    Emit(TokenType::kEnd, "", src_.size());
    return std::move(tokens_);
  }

 private:
  int LineAt(size_t offset) const {
    return 1 +
           static_cast<int>(std::lower_bound(newlines_.begin(), newlines_.end(), offset) - newlines_.begin());
  }

  absl::Status Error(size_t offset, const std::string& message) const {
    return absl::InvalidArgumentError(absl::StrCat("template line ", LineAt(offset), ": ", message));
  }

  Token& Emit(TokenType type, std::string text, size_t offset) {
    tokens_.push_back(Token{type, std::move(text), LineAt(offset)});
    return tokens_.back();
  }

  size_t FindTagStart(size_t pos) const {
    for (size_t i = src_.find('{', pos); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  size_t SkipWhitespace(size_t pos) const {
    while (pos < src_.size()) {
      size_t next = pos;
      if (!py::IsSpace(py::NextCodePoint(src_, &next))) break;
      pos = next;
    }
    return pos;
  }

  bool StartsWith(size_t pos, std::string_view s) const { return src_.compare(pos, s.size(), s) == 0; }

  // `-` strips all whitespace before the tag; otherwise lstrip_blocks strips
  // the blanks between the line start and a block or comment tag.
  void StripBeforeTag(std::string* text, char sign, bool is_variable, bool line_starting) const {
    if (sign == '-') {
      *text = py::Strip(*text, std::nullopt, false, true);
      return;
    }
    if (sign == '+' || !options_.lstrip_blocks || is_variable) return;
    const size_t nl = text->rfind('\n');
    const size_t line_start = nl == std::string::npos ? 0 : nl + 1;
    if (line_start == 0 && !line_starting) return;
    if (line_start == text->size()) return;
    const std::u32string rest = py::Decode(std::string_view(*text).substr(line_start));
    if (std::all_of(rest.begin(), rest.end(), py::IsSpace)) text->resize(line_start);
  }

  // Position after a tag's closing delimiter (ending at `end`): `-` eats the
  // whitespace that follows, `+` nothing, otherwise trim_blocks one newline.
  size_t AfterTagEnd(size_t end, char sign, bool trim) const {
    if (sign == '-') return SkipWhitespace(end);
    if (sign != '+' && trim && options_.trim_blocks && end < src_.size() && src_[end] == '\n') return end + 1;
    return end;
  }

  // `{% raw %}` after the `{%` and sign at `p`: the body's start, or npos.
  size_t MatchRawBegin(size_t p) const {
    p = SkipWhitespace(p);
    if (!StartsWith(p, "raw")) return std::string::npos;
    p = SkipWhitespace(p + 3);
    if (StartsWith(p, "-%}")) return SkipWhitespace(p + 3);
    if (StartsWith(p, "%}")) return p + 2;
    return std::string::npos;
  }

  absl::StatusOr<size_t> LexRaw(size_t tag, size_t body, bool line_starting) {
    for (size_t i = src_.find("{%", body); i != std::string::npos; i = src_.find("{%", i + 1)) {
      size_t p = i + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      p = SkipWhitespace(p);
      if (!StartsWith(p, "endraw")) continue;
      p = SkipWhitespace(p + 6);
      char end_sign = 0;
      if (StartsWith(p, "-%}") || StartsWith(p, "+%}")) {
        end_sign = src_[p];
        p += 3;
      } else if (StartsWith(p, "%}")) {
        p += 2;
      } else {
        continue;
      }
      std::string text = src_.substr(body, i - body);
      StripBeforeTag(&text, sign, /*is_variable=*/false, line_starting);
      if (!text.empty()) Emit(TokenType::kData, std::move(text), body);
      return AfterTagEnd(p, end_sign, /*trim=*/true);
    }
    return Error(tag, "missing end of raw directive '{% endraw %}'");
  }

  // Tokens of one `{{ ... }}` or `{% ... %}` starting at p; returns the
  // position after its end.
  absl::StatusOr<size_t> LexTag(bool block, size_t tag, size_t p) {
    std::vector<char> balance;
    const size_t n = src_.size();
    while (true) {
      if (balance.empty()) {
        if (block) {
          if (StartsWith(p, "+%}") || StartsWith(p, "-%}")) {
            Emit(TokenType::kBlockEnd, "", p);
            return AfterTagEnd(p + 3, src_[p], true);
          }
          if (StartsWith(p, "%}")) {
            Emit(TokenType::kBlockEnd, "", p);
            return AfterTagEnd(p + 2, 0, true);
          }
        } else {
          if (StartsWith(p, "-}}")) {
            Emit(TokenType::kVariableEnd, "", p);
            return AfterTagEnd(p + 3, '-', false);
          }
          if (StartsWith(p, "}}")) {
            Emit(TokenType::kVariableEnd, "", p);
            return p + 2;
          }
        }
      }
      if (p >= n) {
        return Error(tag, absl::StrCat("unexpected end of template: the tag opened here is not closed with '",
                                       block ? "%}" : "}}", "'"));
      }
      const size_t next = SkipWhitespace(p);
      if (next != p) {
        p = next;
        continue;
      }
      const char c = src_[p];
      if (IsDigitChar(c)) {
        absl::StatusOr<size_t> end = LexNumber(p);
        if (!end.ok()) return end.status();
        p = *end;
      } else if (IsNameStart(c)) {
        size_t e = p + 1;
        while (e < n && IsNameChar(src_[e])) ++e;
        Emit(TokenType::kName, src_.substr(p, e - p), p);
        p = e;
      } else if (c == '\'' || c == '"') {
        absl::StatusOr<size_t> end = LexString(p);
        if (!end.ok()) return end.status();
        p = *end;
      } else {
        absl::StatusOr<size_t> end = LexOperator(p, &balance);
        if (!end.ok()) return end.status();
        p = *end;
      }
    }
  }

  // Digits with single '_' separators ("1_000"); npos when none at pos.
  size_t ScanDigits(size_t pos) const {
    if (pos >= src_.size() || !IsDigitChar(src_[pos])) return std::string::npos;
    size_t e = pos + 1;
    while (e < src_.size()) {
      if (IsDigitChar(src_[e])) {
        ++e;
      } else if (src_[e] == '_' && e + 1 < src_.size() && IsDigitChar(src_[e + 1])) {
        e += 2;
      } else {
        break;
      }
    }
    return e;
  }

  static std::string WithoutUnderscores(std::string s) {
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    return s;
  }

  absl::StatusOr<size_t> LexNumber(size_t p) {
    // Floats first, as Jinja's lexer: "1.5", "1e3", "1.5e-3"; not after a '.'.
    if (p == 0 || src_[p - 1] != '.') {
      const size_t int_end = ScanDigits(p);
      size_t e = int_end;
      bool is_float = false;
      if (e < src_.size() && src_[e] == '.') {
        const size_t frac_end = ScanDigits(e + 1);
        if (frac_end != std::string::npos) e = frac_end, is_float = true;
      }
      if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
        size_t x = e + 1;
        if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
        const size_t exp_end = ScanDigits(x);
        if (exp_end != std::string::npos) e = exp_end, is_float = true;
      }
      if (is_float) {
        Token& t = Emit(TokenType::kFloat, src_.substr(p, e - p), p);
        t.float_value = std::strtod(WithoutUnderscores(t.text).c_str(), nullptr);
        return e;
      }
    }
    int base = 10;
    size_t digits = p;
    size_t e;
    if (src_[p] == '0' && p + 1 < src_.size() &&
        std::string_view("bBoOxX").find(src_[p + 1]) != std::string::npos) {
      const char prefix = static_cast<char>(src_[p + 1] | 0x20);
      base = prefix == 'b' ? 2 : (prefix == 'o' ? 8 : 16);
      digits = p + 2;
      e = digits;
      while (e < src_.size()) {
        size_t d = e + (src_[e] == '_' ? 1 : 0);
        if (d >= src_.size()) break;
        const int v = HexValue(src_[d]);
        if (v < 0 || v >= base) break;
        e = d + 1;
      }
      if (e == digits) return Error(p, "invalid integer literal");
    } else if (src_[p] == '0') {
      e = p + 1;
      while (e < src_.size() &&
             (src_[e] == '0' || (src_[e] == '_' && e + 1 < src_.size() && src_[e + 1] == '0'))) {
        e += src_[e] == '_' ? 2 : 1;
      }
    } else {
      e = ScanDigits(p);
    }
    Token& t = Emit(TokenType::kInteger, src_.substr(p, e - p), p);
    const std::string clean = WithoutUnderscores(src_.substr(digits, e - digits));
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(clean.c_str(), &end, base);
    if (errno == ERANGE) return Error(p, "integer literal out of range: " + t.text);
    t.int_value = v;
    return e;
  }

  absl::StatusOr<size_t> LexString(size_t p) {
    const char quote = src_[p];
    size_t e = p + 1;
    while (e < src_.size() && src_[e] != quote) e += src_[e] == '\\' ? 2 : 1;
    if (e >= src_.size()) return Error(p, "unterminated string literal");
    absl::StatusOr<std::string> value = Unescape(p, std::string_view(src_).substr(p + 1, e - p - 1));
    if (!value.ok()) return value.status();
    Emit(TokenType::kString, std::move(*value), p);
    return e + 1;
  }

  // Python's unicode-escape decoding of a string literal's body.
  absl::StatusOr<std::string> Unescape(size_t offset, std::string_view s) const {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '\\' || i + 1 >= s.size()) {
        out.push_back(s[i]);
        continue;
      }
      const char c = s[++i];
      switch (c) {
        case '\n':
          break;
        case '\\':
        case '\'':
        case '"':
          out.push_back(c);
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t width = c == 'x' ? 2 : (c == 'u' ? 4 : 8);
          char32_t cp = 0;
          for (size_t k = 0; k < width; ++k) {
            const int v = i + 1 + k < s.size() ? HexValue(s[i + 1 + k]) : -1;
            if (v < 0) return Error(offset, absl::StrCat("truncated \\", std::string(1, c), " escape"));
            cp = cp * 16 + static_cast<char32_t>(v);
          }
          if (cp > 0x10FFFF) return Error(offset, "illegal Unicode character in string literal");
          py::AppendUtf8(cp, &out);
          i += width;
          break;
        }
        default:
          if (c >= '0' && c <= '7') {
            char32_t cp = 0;
            size_t k = 0;
            while (k < 3 && i + k < s.size() && s[i + k] >= '0' && s[i + k] <= '7') {
              cp = cp * 8 + static_cast<char32_t>(s[i + k] - '0');
              ++k;
            }
            py::AppendUtf8(cp, &out);
            i += k - 1;
          } else if (c == 'N') {
            return Error(offset, "\\N{...} escapes are not supported");
          } else {
            out.push_back('\\');
            out.push_back(c);
          }
      }
    }
    return out;
  }

  absl::StatusOr<size_t> LexOperator(size_t p, std::vector<char>* balance) {
    static constexpr std::string_view kTwoChar[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwoChar) {
      if (StartsWith(p, op)) {
        Emit(TokenType::kOperator, std::string(op), p);
        return p + 2;
      }
    }
    const char c = src_[p];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      size_t next = p;
      std::string ch;
      py::AppendUtf8(py::NextCodePoint(src_, &next), &ch);
      return Error(p, "unexpected char '" + ch + "'");
    }
    if (c == '(' || c == '[' || c == '{') {
      balance->push_back(c == '(' ? ')' : (c == '[' ? ']' : '}'));
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance->empty()) return Error(p, absl::StrCat("unexpected '", std::string(1, c), "'"));
      if (balance->back() != c) {
        return Error(p, absl::StrCat("unexpected '", std::string(1, c), "', expected '",
                                     std::string(1, balance->back()), "'"));
      }
      balance->pop_back();
    }
    Emit(TokenType::kOperator, std::string(1, c), p);
    return p + 1;
  }

  std::string src_;
  LexerOptions options_;
  std::vector<size_t> newlines_;
  std::vector<Token> tokens_;
};

// Jinja normalizes "\r\n" and "\r" to "\n" and, by default, drops one
// trailing newline.
std::string NormalizeNewlines(std::string_view source, bool keep_trailing_newline) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source, const LexerOptions& options) {
  if (!py::IsValidUtf8(source)) return absl::InvalidArgumentError("template source is not valid UTF-8");
  Lexer lexer(NormalizeNewlines(source, options.keep_trailing_newline), options);
  return lexer.Run();
}

std::string DescribeToken(const Token& token) {
  switch (token.type) {
    case TokenType::kData:
      return "template data";
    case TokenType::kVariableBegin:
      return "'{{'";
    case TokenType::kVariableEnd:
      return "end of print statement '}}'";
    case TokenType::kBlockBegin:
      return "'{%'";
    case TokenType::kBlockEnd:
      return "end of statement block '%}'";
    case TokenType::kName:
    case TokenType::kOperator:
      return "'" + token.text + "'";
    case TokenType::kString:
      return "string literal";
    case TokenType::kInteger:
      return "integer " + token.text;
    case TokenType::kFloat:
      return "float " + token.text;
    case TokenType::kEnd:
      return "end of template";
  }
  return "token";
}

}  // namespace shardlm::jinja
