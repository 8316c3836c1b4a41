// Jinja's filters over strings and numbers (the table is in jinja_filters.cc).
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "jinja/jinja_filters_impl.h"
#include "jinja/jinja_methods.h"
#include "jinja/jinja_ops.h"
#include "jinja/py_string.h"

namespace shardlm::jinja::filters {
namespace {

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// Python float(str): surrounding whitespace, '_' between digits, inf / nan.
std::optional<double> ParsePyFloat(const std::string& text) {
  std::string s = py::Strip(text, std::nullopt, true, true);
  std::string lower = py::Lower(s);
  const size_t sign = (!lower.empty() && (lower[0] == '+' || lower[0] == '-')) ? 1 : 0;
  const std::string word = lower.substr(sign);
  if (word == "inf" || word == "infinity" || word == "nan") return std::strtod(lower.c_str(), nullptr);
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
        return std::nullopt;
      }
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(s[i])) &&
        std::string_view("+-.eE").find(s[i]) == std::string_view::npos) {
      return std::nullopt;
    }
    clean.push_back(s[i]);
  }
  if (clean.empty() || clean.find_first_of("0123456789") == std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return v;
}

// Python int(str, base).
std::optional<int64_t> ParsePyInt(const std::string& text, int base) {
  std::string s = py::Strip(text, std::nullopt, true, true);
  bool negative = false;
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  if (i + 1 < s.size() && s[i] == '0') {
    const char p = static_cast<char>(s[i + 1] | 0x20);
    const int prefix_base = p == 'x' ? 16 : (p == 'o' ? 8 : (p == 'b' ? 2 : 0));
    if (prefix_base != 0 && (base == prefix_base || base == 0)) {
      base = prefix_base;
      i += 2;
      if (i < s.size() && s[i] == '_') ++i;
    }
  }
  if (base == 0) base = 10;
  if (i >= s.size()) return std::nullopt;
  int64_t v = 0;
  bool prev_digit = false;
  for (; i < s.size(); ++i) {
    if (s[i] == '_' && prev_digit && i + 1 < s.size()) {
      prev_digit = false;
      continue;
    }
    const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(s[i])));
    const int d = (c >= '0' && c <= '9') ? c - '0' : ((c >= 'a' && c <= 'z') ? c - 'a' + 10 : 99);
    if (d >= base) return std::nullopt;
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return std::nullopt;
    prev_digit = true;
  }
  if (!prev_digit) return std::nullopt;
  return negative ? -v : v;
}

// Python's round(x, n): correctly rounded, ties to even.
double RoundHalfEven(double x, int64_t precision) {
  if (!std::isfinite(x)) return x;
  if (precision >= 0) {
    if (precision > 300) return x;
    char buf[400];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(precision), x);
    return std::strtod(buf, nullptr);
  }
  const double scale = std::pow(10.0, static_cast<double>(-precision));
  return std::nearbyint(x / scale) * scale;
}

}  // namespace

absl::StatusOr<Value> StringFilter(const Value& in, const CallArgs& args, const char* name,
                                   std::string (*fn)(std::string_view)) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs(name, args, {}, &a));
  return Value::String(fn(ToStr(in)));
}

absl::StatusOr<Value> FAbs(const Value& in, const CallArgs& args, const Limits&) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("abs", args, {}, &a));
  if (!in.is_number()) return FilterError("bad operand type for abs(): '" + TypeName(in) + "'");
  if (in.is_integral()) {
    if (in.int_value() == INT64_MIN) return FilterError("integer overflow (beyond 64 bits)");
    return Value::Int(std::abs(in.int_value()));
  }
  return Value::Float(std::fabs(in.number_value()));
}

absl::StatusOr<Value> FCenter(const Value& in, const CallArgs& args, const Limits& limits) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("center", args, {"width"}, &a));
  CallArgs method_args;
  method_args.positional.push_back(a[0].is_undefined() ? Value::Int(80) : a[0]);
  SHARDLM_ASSIGN_OR_RETURN(int64_t width, IntArg("center", method_args.positional[0], 80));
  if (width > limits.max_output_bytes) return FilterError("center() width too large");
  std::optional<Value> center = BoundMethod(Value::String(ToStr(in)), "center");
  return center->function()(method_args);
}

absl::StatusOr<Value> FEscape(const Value& in, const CallArgs& args, const Limits&) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("escape", args, {}, &a));
  return Value::String(HtmlEscape(ToStr(in)));
}

absl::StatusOr<Value> FFloat(const Value& in, const CallArgs& args, const Limits&) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("float", args, {"default"}, &a));
  const Value fallback = a[0].is_undefined() ? Value::Float(0.0) : a[0];
  if (in.is_undefined()) return UndefinedError(in);
  if (in.is_number()) return Value::Float(in.number_value());
  if (in.is_string()) {
    if (std::optional<double> f = ParsePyFloat(in.string_value())) return Value::Float(*f);
  }
  return fallback;
}

absl::StatusOr<Value> FFormat(const Value& in, const CallArgs& args, const Limits& limits) {
  if (!args.positional.empty() && !args.keyword.empty()) {
    return FilterError("can't handle positional and keyword arguments at the same time");
  }
  Value values;
  if (!args.keyword.empty()) {
    Dict d;
    for (const auto& [k, v] : args.keyword) d.Set(Value::String(k), v);
    values = Value::MakeDict(std::move(d));
  } else {
    values = Value::Tuple(args.positional);
  }
  SHARDLM_ASSIGN_OR_RETURN(std::string s, PercentFormat(ToStr(in), values));
  SHARDLM_RETURN_IF_ERROR(CheckSize(s, limits));
  return Value::String(std::move(s));
}

absl::StatusOr<Value> FIndent(const Value& in, const CallArgs& args, const Limits& limits) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("indent", args, {"width", "first", "blank"}, &a));
  std::string indention;
  if (a[0].is_string()) {
    indention = a[0].string_value();
  } else {
    SHARDLM_ASSIGN_OR_RETURN(int64_t width, IntArg("indent", a[0], 4));
    if (width > 10000) return FilterError("indent() width too large");
    indention.assign(std::max<int64_t>(width, 0), ' ');
  }
  const std::vector<std::string> lines = py::SplitLines(ToStr(in) + "\n", false);
  std::string rv;
  if (Truthy(a[2])) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i > 0 ? "\n" + indention : "") + lines[i];
  } else {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) rv += "\n" + (lines[i].empty() ? "" : indention);
      rv += lines[i];
    }
  }
  if (Truthy(a[1])) rv = indention + rv;
  SHARDLM_RETURN_IF_ERROR(CheckSize(rv, limits));
  return Value::String(std::move(rv));
}

absl::StatusOr<Value> FInt(const Value& in, const CallArgs& args, const Limits&) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("int", args, {"default", "base"}, &a));
  const Value fallback = a[0].is_undefined() ? Value::Int(0) : a[0];
  SHARDLM_ASSIGN_OR_RETURN(int64_t base, IntArg("int", a[1], 10));
  if (in.is_undefined()) return UndefinedError(in);
  double f;
  if (in.is_string()) {
    if (std::optional<int64_t> i = ParsePyInt(in.string_value(), static_cast<int>(base)))
      return Value::Int(*i);
    std::optional<double> parsed = ParsePyFloat(in.string_value());
    if (!parsed) return fallback;
    f = *parsed;
  } else if (in.is_integral()) {
    return Value::Int(in.int_value());
  } else if (in.is_number()) {
    f = in.number_value();
  } else {
    return fallback;
  }
  if (std::isnan(f)) return fallback;
  if (std::isinf(f)) return FilterError("cannot convert float infinity to integer");
  if (std::fabs(f) >= 9.2e18) return FilterError("integer overflow (beyond 64 bits)");
  return Value::Int(static_cast<int64_t>(std::trunc(f)));
}

absl::StatusOr<Value> FReplace(const Value& in, const CallArgs& args, const Limits& limits) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("replace", args, {"old", "new", "count"}, &a));
  SHARDLM_ASSIGN_OR_RETURN(int64_t count, IntArg("replace", a[2], -1));
  std::string s = py::Replace(ToStr(in), ToStr(a[0]), ToStr(a[1]), count);
  SHARDLM_RETURN_IF_ERROR(CheckSize(s, limits));
  return Value::String(std::move(s));
}

absl::StatusOr<Value> FRound(const Value& in, const CallArgs& args, const Limits&) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("round", args, {"precision", "method"}, &a));
  SHARDLM_ASSIGN_OR_RETURN(int64_t precision, IntArg("round", a[0], 0));
  std::string method = "common";
  if (!a[1].is_undefined()) method = ToStr(a[1]);
  if (method != "common" && method != "ceil" && method != "floor") {
    return FilterError("method must be common, ceil or floor");
  }
  if (in.is_undefined()) return UndefinedError(in);
  if (!in.is_number()) return FilterError("type " + TypeName(in) + " doesn't define __round__ method");
  if (method == "common") {
    if (in.is_integral()) {
      if (precision >= 0) return Value::Int(in.int_value());
      return Value::Int(static_cast<int64_t>(RoundHalfEven(static_cast<double>(in.int_value()), precision)));
    }
    return Value::Float(RoundHalfEven(in.number_value(), precision));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double scaled = in.number_value() * scale;
  return Value::Float((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

absl::StatusOr<Value> FSafe(const Value& in, const CallArgs& args, const Limits&) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("safe", args, {}, &a));
  return Value::String(ToStr(in));
}

absl::StatusOr<Value> FString(const Value& in, const CallArgs& args, const Limits&) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("string", args, {}, &a));
  return Value::String(ToStr(in));
}

absl::StatusOr<Value> FToJson(const Value& in, const CallArgs& args, const Limits& limits) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(
      BindArgs("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"}, &a));
  JsonOptions options;
  options.ensure_ascii = Truthy(a[0]);
  if (a[1].is_string()) {
    options.indent = a[1].string_value();
  } else if (a[1].is_integral()) {
    if (a[1].int_value() > 10000) return FilterError("tojson indent too large");
    options.indent = std::string(std::max<int64_t>(a[1].int_value(), 0), ' ');
  } else if (!a[1].is_undefined() && !a[1].is_none()) {
    return FilterError("tojson indent must be an int or a string");
  }
  if (!a[2].is_undefined() && !a[2].is_none()) {
    if (!a[2].is_sequence() || a[2].items().size() != 2 || !a[2].items()[0].is_string() ||
        !a[2].items()[1].is_string()) {
      return FilterError("tojson separators must be a pair of strings");
    }
    options.separators.emplace(a[2].items()[0].string_value(), a[2].items()[1].string_value());
  }
  options.sort_keys = Truthy(a[3]);
  SHARDLM_ASSIGN_OR_RETURN(std::string text, ToJsonText(in, options));
  SHARDLM_RETURN_IF_ERROR(CheckSize(text, limits));
  return Value::String(std::move(text));
}

absl::StatusOr<Value> FTrim(const Value& in, const CallArgs& args, const Limits&) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("trim", args, {"chars"}, &a));
  SHARDLM_ASSIGN_OR_RETURN(std::optional<std::string> chars, StringArg("trim", a[0]));
  return Value::String(py::Strip(ToStr(in), chars, true, true));
}

absl::StatusOr<Value> FTruncate(const Value& in, const CallArgs& args, const Limits&) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("truncate", args, {"length", "killwords", "end", "leeway"}, &a));
  SHARDLM_ASSIGN_OR_RETURN(int64_t length, IntArg("truncate", a[0], 255));
  SHARDLM_ASSIGN_OR_RETURN(int64_t leeway, IntArg("truncate", a[3], 5));
  const std::string end = a[2].is_undefined() ? "..." : ToStr(a[2]);
  const auto end_len = py::Length(end);
  if (length < end_len) return FilterError(absl::StrCat("expected length >= ", end_len, ", got ", length));
  if (leeway < 0) return FilterError(absl::StrCat("expected leeway >= 0, got ", leeway));
  const std::u32string s = py::Decode(ToStr(in));
  if (static_cast<int64_t>(s.size()) <= length + leeway) return Value::String(py::Encode(s));
  const std::string head = py::Encode(std::u32string_view(s).substr(0, length - end_len));
  if (Truthy(a[1])) return Value::String(head + end);
  return Value::String(py::RSplit(head, std::string(" "), 1)[0] + end);
}

absl::StatusOr<Value> FWordcount(const Value& in, const CallArgs& args, const Limits&) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("wordcount", args, {}, &a));
  int64_t words = 0;
  bool in_word = false;
  for (char32_t c : py::Decode(ToStr(in))) {
    const bool word_char = py::IsAlpha(c) || py::IsDigit(c) || c == '_';
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value::Int(words);
}

}  // namespace shardlm::jinja::filters
