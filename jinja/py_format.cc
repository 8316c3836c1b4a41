// Python's str.format: the replacement fields and the format-spec
// mini-language, as CPython parses and applies them (py_format.h).
#include "jinja/py_format.h"

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "jinja/jinja_ops.h"
#include "jinja/py_string.h"

namespace shardlm::jinja {

std::string PadTo(const std::string& s, int64_t width, char32_t fill, char align) {
  const int64_t pad = width - py::Length(s);
  if (pad <= 0) return s;
  std::string f;
  py::AppendUtf8(fill, &f);
  auto repeat = [&f](int64_t n) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += f;
    return out;
  };
  if (align == '<') return s + repeat(pad);
  if (align == '^') return repeat(pad / 2) + s + repeat(pad - pad / 2);
  return repeat(pad) + s;
}

namespace {

absl::Status ValueError(const std::string& message) { return absl::InvalidArgumentError(message); }

// str.format's format-spec mini-language: [[fill]align][sign][0][width][.precision][type].
struct FormatSpec {
  char32_t fill = ' ';
  char align = 0;  // 0: by type (numbers right, the rest left)
  char sign = '-';
  int64_t width = 0;
  int precision = -1;  // -1: none
  char type = 0;       // 0: none
};

absl::StatusOr<FormatSpec> ParseFormatSpec(std::string_view text) {
  const std::u32string cps = py::Decode(text);
  FormatSpec f;
  size_t i = 0;
  auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (cps.size() >= 2 && is_align(cps[1])) {
    f.fill = cps[0];
    f.align = static_cast<char>(cps[1]);
    i = 2;
  } else if (!cps.empty() && is_align(cps[0])) {
    f.align = static_cast<char>(cps[0]);
    i = 1;
  }
  if (i < cps.size() && (cps[i] == '+' || cps[i] == '-' || cps[i] == ' '))
    f.sign = static_cast<char>(cps[i++]);
  if (i < cps.size() && cps[i] == '0') {
    if (f.align == 0) f.fill = '0', f.align = '=';
    ++i;
  }
  while (i < cps.size() && cps[i] >= '0' && cps[i] <= '9')
    f.width = std::min<int64_t>(f.width * 10 + (cps[i++] - '0'), 10000);
  if (i < cps.size() && cps[i] == '.') {
    f.precision = 0;
    ++i;
    while (i < cps.size() && cps[i] >= '0' && cps[i] <= '9')
      f.precision = std::min(f.precision * 10 + int(cps[i++] - '0'), 1000);
  }
  if (i < cps.size()) f.type = static_cast<char>(cps[i++]);
  if (i != cps.size()) return ValueError("Invalid format specifier");
  return f;
}

absl::Status UnknownFormatCode(char type, const Value& v) {
  return ValueError(absl::StrCat("Unknown format code '", std::string(1, type), "' for object of type '",
                                 TypeName(v), "'"));
}

// A float as the types f, F, e, E, g, G and % show it.
std::string FloatBody(double x, char type, int precision) {
  char buf[1200];
  char conv = type;
  if (type == '%') x *= 100, conv = 'f';
  const char fmt[] = {'%', '.', '*', conv == 'F' ? 'f' : conv, 0};
  std::snprintf(buf, sizeof(buf), fmt, precision < 0 ? 6 : precision, x);
  std::string body = buf;
  if (type == '%') body += "%";
  return body;
}

// An integer as the types d, x, X, o and b show it.
std::string IntegerBody(int64_t n, char type) {
  const unsigned long long mag =
      n < 0 ? 0ULL - static_cast<unsigned long long>(n) : static_cast<unsigned long long>(n);
  std::string body;
  if (type == 'b') {
    for (unsigned long long m = mag; m > 0; m >>= 1)
      body.insert(body.begin(), static_cast<char>('0' + (m & 1)));
    if (body.empty()) body = "0";
  } else {
    char buf[64];
    const char fmt[] = {'%', 'l', 'l', type == 'd' ? 'u' : type, 0};
    std::snprintf(buf, sizeof(buf), fmt, mag);
    body = buf;
  }
  return n < 0 ? "-" + body : body;
}

// `v` as the spec's type shows it, before the sign and the padding; *numeric
// says whether those treat it as a number.
absl::StatusOr<std::string> FormatBody(const Value& v, FormatSpec& f, bool* numeric) {
  *numeric = v.is_number();
  if (f.type == 0 && v.is_string()) f.type = 's';
  if (f.type == 's') {
    if (!v.is_string()) return UnknownFormatCode('s', v);
    *numeric = false;
    if (f.precision < 0) return v.string_value();
    return py::Encode(py::Decode(v.string_value()).substr(0, f.precision));
  }
  if (f.type != 0 && std::string_view("fFeEgG%").find(f.type) != std::string_view::npos) {
    if (!v.is_number()) return UnknownFormatCode(f.type, v);
    return FloatBody(v.number_value(), f.type, f.precision);
  }
  if (f.type == 'd' || f.type == 'x' || f.type == 'X' || f.type == 'o' || f.type == 'b') {
    if (!v.is_integral()) return UnknownFormatCode(f.type, v);
    return IntegerBody(v.int_value(), f.type);
  }
  if (f.type != 0) return UnknownFormatCode(f.type, v);
  if (f.precision >= 0 && v.kind() == Value::Kind::kFloat) {
    char buf[1200];
    std::snprintf(buf, sizeof(buf), "%.*g", f.precision, v.number_value());
    return std::string(buf);
  }
  return ToStr(v);
}

absl::StatusOr<std::string> ApplyFormatSpec(const Value& v, std::string_view spec) {
  SHARDLM_ASSIGN_OR_RETURN(FormatSpec f, ParseFormatSpec(spec));
  bool numeric = false;
  SHARDLM_ASSIGN_OR_RETURN(std::string body, FormatBody(v, f, &numeric));
  if (numeric && f.sign != '-' && !body.empty() && body[0] != '-') body = std::string(1, f.sign) + body;
  if (f.align == 0) f.align = numeric ? '>' : '<';
  if (f.align == '=' && numeric && !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) {
    return body.substr(0, 1) + PadTo(body.substr(1), f.width - 1, f.fill, '>');
  }
  return PadTo(body, f.width, f.fill, f.align == '=' ? '>' : f.align);
}

bool AllDigits(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char d) { return d >= '0' && d <= '9'; });
}

// Numbering of str.format's fields: automatic ("{}") or manual ("{0}"), never both.
struct FieldNumbering {
  int next = 0;
  bool manual = false;
};

// The value a replacement field names: "0", "" (the next), "name", then any
// ".attr" and "[key]" accessors.
absl::StatusOr<Value> FieldValue(const std::string& field, const CallArgs& args, FieldNumbering& numbering) {
  const size_t accessor = std::min(field.find('.'), field.find('['));
  const std::string head = field.substr(0, accessor);
  Value value;
  if (head.empty() || AllDigits(head)) {
    int index;
    if (head.empty()) {
      if (numbering.manual)
        return ValueError("cannot switch from manual field specification to automatic field numbering");
      index = numbering.next++;
    } else {
      if (numbering.next > 0)
        return ValueError("cannot switch from automatic field numbering to manual field specification");
      numbering.manual = true;
      index = std::stoi(head.substr(0, 6));
    }
    if (index >= static_cast<int>(args.positional.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("Replacement index ", index, " out of range for positional args tuple"));
    }
    value = args.positional[index];
  } else {
    const auto it = std::find_if(args.keyword.begin(), args.keyword.end(),
                                 [&](const auto& kv) { return kv.first == head; });
    if (it == args.keyword.end()) return absl::InvalidArgumentError("KeyError: '" + head + "'");
    value = it->second;
  }
  for (size_t p = accessor; p < field.size();) {
    if (field[p] == '.') {
      const size_t end = std::min(field.find('.', p + 1), field.find('[', p + 1));
      SHARDLM_ASSIGN_OR_RETURN(value, GetAttr(value, field.substr(p + 1, end - p - 1)));
      p = end;
    } else if (field[p] == '[') {
      const size_t end = field.find(']', p);
      if (end == std::string::npos) return ValueError("Missing ']' in format string");
      const std::string key = field.substr(p + 1, end - p - 1);
      const bool numeric = !key.empty() && AllDigits(key);
      SHARDLM_ASSIGN_OR_RETURN(
          value, GetItem(value, numeric ? Value::Int(std::stoll(key.substr(0, 18))) : Value::String(key)));
      p = end + 1;
    } else {
      return ValueError("Only '.' or '[' may follow ']' in format field specifier");
    }
  }
  return value;
}

// One replacement field's text ("0.name!r:>10" between the braces).
absl::StatusOr<std::string> FormatField(std::string field, const CallArgs& args, FieldNumbering& numbering) {
  std::string spec;
  if (const size_t colon = field.find(':'); colon != std::string::npos) {
    spec = field.substr(colon + 1);
    field.resize(colon);
  }
  char conversion = 0;
  if (const size_t bang = field.find('!'); bang != std::string::npos) {
    if (bang + 2 != field.size()) return ValueError("expected ':' after conversion specifier");
    conversion = field[bang + 1];
    field.resize(bang);
  }
  SHARDLM_ASSIGN_OR_RETURN(Value value, FieldValue(field, args, numbering));
  if (conversion == 'r' || conversion == 'a') {
    value = Value::String(Repr(value));
  } else if (conversion == 's') {
    value = Value::String(ToStr(value));
  } else if (conversion != 0) {
    return ValueError(absl::StrCat("Unknown conversion specifier ", std::string(1, conversion)));
  }
  return ApplyFormatSpec(value, spec);
}

// str.format: "{}", "{0}", "{name}", "{0.attr}", "{0[key]}", "!r", ":spec".
}  // namespace

absl::StatusOr<std::string> PyFormat(const std::string& fmt, const CallArgs& args) {
  std::string out;
  FieldNumbering numbering;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      return ValueError("Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) return ValueError("Single '{' encountered in format string");
    SHARDLM_ASSIGN_OR_RETURN(std::string piece,
                             FormatField(fmt.substr(i + 1, close - i - 1), args, numbering));
    out += piece;
    i = close;
  }
  return out;
}

}  // namespace shardlm::jinja
