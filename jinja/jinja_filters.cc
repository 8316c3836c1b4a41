// Jinja's filters (declared in jinja_builtins.h), one function each, in the
// alphabetical table at the end.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "jinja/jinja_builtins.h"
#include "jinja/jinja_methods.h"
#include "jinja/jinja_ops.h"
#include "jinja/py_string.h"

namespace shardlm::jinja {
namespace {

using FilterFn = absl::StatusOr<Value> (*)(const Value& in, const CallArgs& args, const Limits& limits);

absl::Status FilterError(const std::string& message) { return absl::InvalidArgumentError(message); }

absl::Status CheckSize(const std::string& s, const Limits& limits) {
  if (static_cast<int64_t>(s.size()) > limits.max_output_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("result too large: over the template limit of ", limits.max_output_bytes, " bytes"));
  }
  return absl::OkStatus();
}

// Jinja's make_attrgetter: "a.0.b" looks up item["a"][0]["b"] (environment.getitem).
absl::StatusOr<Value> GetPath(Value item, const Value& attribute, const Value& fallback) {
  std::vector<Value> parts;
  if (attribute.is_string()) {
    for (const std::string& part : py::Split(attribute.string_value(), std::string("."), -1)) {
      const bool digits =
          !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      parts.push_back(digits ? Value::Int(std::strtoll(part.c_str(), nullptr, 10)) : Value::String(part));
    }
  } else if (!attribute.is_undefined() && !attribute.is_none()) {
    parts.push_back(attribute);
  }
  for (const Value& part : parts) {
    SHARDLM_ASSIGN_OR_RETURN(item, GetItem(item, part));
    if (!fallback.is_undefined() && !fallback.is_none() && item.is_undefined()) item = fallback;
  }
  return item;
}

Value IgnoreCase(const Value& v) { return v.is_string() ? Value::String(py::Lower(v.string_value())) : v; }

// Sort key of an item: the value(s) at a comma-separated list of attribute paths.
absl::StatusOr<Value> SortKey(const Value& item, const Value& attribute, bool case_sensitive, bool multi) {
  std::vector<Value> attrs;
  if (multi && attribute.is_string()) {
    for (const std::string& a : py::Split(attribute.string_value(), std::string(","), -1))
      attrs.push_back(Value::String(a));
  } else {
    attrs.push_back(attribute);
  }
  std::vector<Value> keys;
  for (const Value& a : attrs) {
    SHARDLM_ASSIGN_OR_RETURN(Value key, GetPath(item, a, Value()));
    keys.push_back(case_sensitive ? key : IgnoreCase(key));
  }
  return multi ? Value::List(std::move(keys)) : keys[0];
}

// Stable sort of items by precomputed keys, as Python's sorted(key=..., reverse=...).
absl::Status SortByKeys(std::vector<Value>* items, std::vector<Value> keys, bool reverse) {
  std::vector<size_t> order(items->size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  absl::Status error;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    absl::StatusOr<int> c = reverse ? Compare(keys[b], keys[a]) : Compare(keys[a], keys[b]);
    if (!c.ok()) {
      if (error.ok()) error = c.status();
      return false;
    }
    return *c < 0;
  });
  SHARDLM_RETURN_IF_ERROR(error);
  std::vector<Value> sorted;
  sorted.reserve(items->size());
  for (size_t i : order) sorted.push_back((*items)[i]);
  *items = std::move(sorted);
  return absl::OkStatus();
}

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

// ---- the filters ----

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

absl::StatusOr<Value> FAttr(const Value& in, const CallArgs& args, const Limits&) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("attr", args, {"name"}, &a));
  if (!a[0].is_string()) return FilterError("attribute name must be a string");
  if (in.is_undefined()) return UndefinedError(in);
  if (std::optional<Value> m = BoundMethod(in, a[0].string_value())) return *m;
  if (in.is_object()) {
    if (const Value* v = in.object().attributes.Find(a[0].string_value())) return *v;
  }
  return Value::Undefined("'" + ObjectTypeRepr(in) + "' has no attribute '" + a[0].string_value() + "'");
}

absl::StatusOr<Value> FBatch(const Value& in, const CallArgs& args, const Limits&) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("batch", args, {"linecount", "fill_with"}, &a));
  SHARDLM_ASSIGN_OR_RETURN(int64_t n, IntArg("batch", a[0], 0));
  if (n <= 0) return FilterError("batch() linecount must be positive");
  SHARDLM_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in));
  std::vector<Value> out, row;
  for (Value& item : items) {
    if (static_cast<int64_t>(row.size()) == n) out.push_back(Value::List(std::move(row))), row.clear();
    row.push_back(std::move(item));
  }
  if (!row.empty()) {
    if (!a[1].is_undefined() && !a[1].is_none()) {
      while (static_cast<int64_t>(row.size()) < n) row.push_back(a[1]);
    }
    out.push_back(Value::List(std::move(row)));
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> StringFilter(const Value& in, const CallArgs& args, const char* name,
                                   std::string (*fn)(std::string_view)) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs(name, args, {}, &a));
  return Value::String(fn(ToStr(in)));
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

absl::StatusOr<Value> FLength(const Value& in, const CallArgs& args, const Limits&) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("length", args, {}, &a));
  SHARDLM_ASSIGN_OR_RETURN(int64_t n, Length(in));
  return Value::Int(n);
}

absl::StatusOr<Value> FDefault(const Value& in, const CallArgs& args, const Limits&) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("default", args, {"default_value", "boolean"}, &a));
  if (in.is_undefined() || (Truthy(a[1]) && !Truthy(in))) {
    const bool given =
        !args.positional.empty() || std::any_of(args.keyword.begin(), args.keyword.end(),
                                                [](const auto& kv) { return kv.first == "default_value"; });
    return given ? a[0] : Value::String("");
  }
  return in;
}

absl::StatusOr<Value> FDictsort(const Value& in, const CallArgs& args, const Limits&) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("dictsort", args, {"case_sensitive", "by", "reverse"}, &a));
  if (!in.is_dict()) return FilterError("'" + TypeName(in) + "' object has no attribute 'items'");
  int pos = 0;
  if (!a[1].is_undefined()) {
    if (a[1].is_string() && a[1].string_value() == "value") {
      pos = 1;
    } else if (!a[1].is_string() || a[1].string_value() != "key") {
      return FilterError("You can only sort by either \"key\" or \"value\"");
    }
  }
  std::vector<Value> items, keys;
  for (const auto& [k, v] : in.dict().entries()) {
    items.push_back(Value::Tuple({k, v}));
    const Value& key = pos == 0 ? k : v;
    keys.push_back(Truthy(a[0]) ? key : IgnoreCase(key));
  }
  SHARDLM_RETURN_IF_ERROR(SortByKeys(&items, std::move(keys), Truthy(a[2])));
  return Value::List(std::move(items));
}

absl::StatusOr<Value> FEscape(const Value& in, const CallArgs& args, const Limits&) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("escape", args, {}, &a));
  return Value::String(HtmlEscape(ToStr(in)));
}

absl::StatusOr<Value> FFirst(const Value& in, const CallArgs& args, const Limits&) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("first", args, {}, &a));
  SHARDLM_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in));
  if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
  return items.front();
}

absl::StatusOr<Value> FLast(const Value& in, const CallArgs& args, const Limits&) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("last", args, {}, &a));
  SHARDLM_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in));
  if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
  return items.back();
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

absl::StatusOr<Value> FItems(const Value& in, const CallArgs& args, const Limits&) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("items", args, {}, &a));
  if (in.is_undefined()) return Value::List({});
  if (!in.is_dict()) return FilterError("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, v] : in.dict().entries()) out.push_back(Value::Tuple({k, v}));
  return Value::List(std::move(out));
}

absl::StatusOr<Value> FJoin(const Value& in, const CallArgs& args, const Limits& limits) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("join", args, {"d", "attribute"}, &a));
  SHARDLM_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in));
  const std::string sep = ToStr(a[0]);
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (!a[1].is_undefined() && !a[1].is_none()) {
      SHARDLM_ASSIGN_OR_RETURN(item, GetPath(item, a[1], Value()));
    }
    if (i > 0) out += sep;
    out += ToStr(item);
    SHARDLM_RETURN_IF_ERROR(CheckSize(out, limits));
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> FList(const Value& in, const CallArgs& args, const Limits&) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("list", args, {}, &a));
  SHARDLM_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in));
  return Value::List(std::move(items));
}

absl::StatusOr<Value> FMap(const Value& in, const CallArgs& args, const Limits& limits) {
  if (!Truthy(in)) return Value::List({});
  SHARDLM_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in));
  std::vector<Value> out;
  if (args.positional.empty()) {
    Value attribute, fallback;
    for (const auto& [k, v] : args.keyword) {
      if (k == "attribute") {
        attribute = v;
      } else if (k == "default") {
        fallback = v;
      } else {
        return FilterError("Unexpected keyword argument '" + k + "'");
      }
    }
    if (attribute.is_undefined()) return FilterError("map requires a filter argument");
    for (const Value& item : items) {
      SHARDLM_ASSIGN_OR_RETURN(Value v, GetPath(item, attribute, fallback));
      out.push_back(std::move(v));
    }
    return Value::List(std::move(out));
  }
  if (!args.positional[0].is_string()) return FilterError("map: the filter name must be a string");
  const std::string name = args.positional[0].string_value();
  if (!IsKnownFilter(name)) return FilterError("No filter named '" + name + "'.");
  CallArgs rest{std::vector<Value>(args.positional.begin() + 1, args.positional.end()), args.keyword};
  for (const Value& item : items) {
    SHARDLM_ASSIGN_OR_RETURN(Value v, ApplyFilter(name, item, rest, limits));
    out.push_back(std::move(v));
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> MinMax(const Value& in, const CallArgs& args, bool max) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs(max ? "max" : "min", args, {"case_sensitive", "attribute"}, &a));
  SHARDLM_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in));
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  SHARDLM_ASSIGN_OR_RETURN(Value best_key, SortKey(items[0], a[1], Truthy(a[0]), false));
  for (size_t i = 1; i < items.size(); ++i) {
    SHARDLM_ASSIGN_OR_RETURN(Value key, SortKey(items[i], a[1], Truthy(a[0]), false));
    SHARDLM_ASSIGN_OR_RETURN(int c, Compare(key, best_key));
    if (max ? c > 0 : c < 0) best = i, best_key = key;
  }
  return items[best];
}

absl::StatusOr<Value> SelectOrReject(const Value& in, const CallArgs& args, bool select, bool by_attribute,
                                     const char* name) {
  if (!Truthy(in)) return Value::List({});
  SHARDLM_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in));
  size_t off = 0;
  Value attribute;
  if (by_attribute) {
    if (args.positional.empty())
      return FilterError(std::string(name) + ": missing parameter for attribute name");
    attribute = args.positional[0];
    off = 1;
  }
  std::string test;
  if (args.positional.size() > off) {
    if (!args.positional[off].is_string())
      return FilterError(std::string(name) + ": the test name must be a string");
    test = args.positional[off].string_value();
    if (!IsKnownTest(test)) return FilterError("No test named '" + test + "'.");
  }
  CallArgs test_args;
  if (args.positional.size() > off + 1) {
    test_args.positional.assign(args.positional.begin() + off + 1, args.positional.end());
  }
  test_args.keyword = args.keyword;
  std::vector<Value> out;
  for (const Value& item : items) {
    Value subject = item;
    if (by_attribute) {
      SHARDLM_ASSIGN_OR_RETURN(subject, GetPath(item, attribute, Value()));
    }
    bool pass;
    if (test.empty()) {
      pass = Truthy(subject);
    } else {
      SHARDLM_ASSIGN_OR_RETURN(pass, ApplyTest(test, subject, test_args));
    }
    if (pass == select) out.push_back(item);
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> FReplace(const Value& in, const CallArgs& args, const Limits& limits) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("replace", args, {"old", "new", "count"}, &a));
  SHARDLM_ASSIGN_OR_RETURN(int64_t count, IntArg("replace", a[2], -1));
  std::string s = py::Replace(ToStr(in), ToStr(a[0]), ToStr(a[1]), count);
  SHARDLM_RETURN_IF_ERROR(CheckSize(s, limits));
  return Value::String(std::move(s));
}

absl::StatusOr<Value> FReverse(const Value& in, const CallArgs& args, const Limits&) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("reverse", args, {}, &a));
  if (in.is_string()) {
    std::u32string cps = py::Decode(in.string_value());
    std::reverse(cps.begin(), cps.end());
    return Value::String(py::Encode(cps));
  }
  absl::StatusOr<std::vector<Value>> items = Iterate(in);
  if (!items.ok()) return FilterError("argument must be iterable");
  std::reverse(items->begin(), items->end());
  return Value::List(std::move(*items));
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

absl::StatusOr<Value> FSort(const Value& in, const CallArgs& args, const Limits&) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("sort", args, {"reverse", "case_sensitive", "attribute"}, &a));
  SHARDLM_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in));
  std::vector<Value> keys;
  for (const Value& item : items) {
    SHARDLM_ASSIGN_OR_RETURN(Value key, SortKey(item, a[2], Truthy(a[1]), true));
    keys.push_back(std::move(key));
  }
  SHARDLM_RETURN_IF_ERROR(SortByKeys(&items, std::move(keys), Truthy(a[0])));
  return Value::List(std::move(items));
}

absl::StatusOr<Value> FString(const Value& in, const CallArgs& args, const Limits&) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("string", args, {}, &a));
  return Value::String(ToStr(in));
}

absl::StatusOr<Value> FSum(const Value& in, const CallArgs& args, const Limits& limits) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("sum", args, {"attribute", "start"}, &a));
  SHARDLM_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in));
  Value total = a[1].is_undefined() ? Value::Int(0) : a[1];
  for (const Value& item : items) {
    Value v = item;
    if (!a[0].is_undefined() && !a[0].is_none()) {
      SHARDLM_ASSIGN_OR_RETURN(v, GetPath(item, a[0], Value()));
    }
    SHARDLM_ASSIGN_OR_RETURN(total, Arithmetic(BinaryOp::kAdd, total, v, limits));
  }
  return total;
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

absl::StatusOr<Value> FUnique(const Value& in, const CallArgs& args, const Limits&) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("unique", args, {"case_sensitive", "attribute"}, &a));
  SHARDLM_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in));
  std::vector<Value> seen, out;
  for (const Value& item : items) {
    SHARDLM_ASSIGN_OR_RETURN(Value key, SortKey(item, a[1], Truthy(a[0]), false));
    if (key.kind() == Value::Kind::kList || key.is_dict()) {
      return FilterError("unhashable type: '" + TypeName(key) + "'");
    }
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return Equals(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value::List(std::move(out));
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

#define SHARDLM_FILTER(name, expr)                                                                           \
  {                                                                                                          \
    name, [](const Value& in, const CallArgs& args, const Limits&) -> absl::StatusOr<Value> { return expr; } \
  }

const std::map<std::string_view, FilterFn>& Filters() {
  static const auto* filters = new std::map<std::string_view, FilterFn>{
      {"abs", FAbs},
      {"attr", FAttr},
      {"batch", FBatch},
      SHARDLM_FILTER("capitalize", StringFilter(in, args, "capitalize", py::Capitalize)),
      {"center", FCenter},
      {"count", FLength},
      {"d", FDefault},
      {"default", FDefault},
      {"dictsort", FDictsort},
      {"e", FEscape},
      {"escape", FEscape},
      {"first", FFirst},
      {"float", FFloat},
      {"forceescape", FEscape},
      {"format", FFormat},
      {"indent", FIndent},
      {"int", FInt},
      {"items", FItems},
      {"join", FJoin},
      {"last", FLast},
      {"length", FLength},
      {"list", FList},
      SHARDLM_FILTER("lower", StringFilter(in, args, "lower", py::Lower)),
      {"map", FMap},
      SHARDLM_FILTER("max", MinMax(in, args, true)),
      SHARDLM_FILTER("min", MinMax(in, args, false)),
      SHARDLM_FILTER("reject", SelectOrReject(in, args, false, false, "reject")),
      SHARDLM_FILTER("rejectattr", SelectOrReject(in, args, false, true, "rejectattr")),
      {"replace", FReplace},
      {"reverse", FReverse},
      {"round", FRound},
      {"safe", FSafe},
      SHARDLM_FILTER("select", SelectOrReject(in, args, true, false, "select")),
      SHARDLM_FILTER("selectattr", SelectOrReject(in, args, true, true, "selectattr")),
      {"sort", FSort},
      {"string", FString},
      {"sum", FSum},
      SHARDLM_FILTER("title", StringFilter(in, args, "title", py::JinjaTitle)),
      {"tojson", FToJson},
      {"trim", FTrim},
      {"truncate", FTruncate},
      {"unique", FUnique},
      SHARDLM_FILTER("upper", StringFilter(in, args, "upper", py::Upper)),
      {"wordcount", FWordcount},
  };
  return *filters;
}

}  // namespace

bool IsKnownFilter(std::string_view name) { return Filters().count(name) > 0; }

absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& input, const CallArgs& args,
                                  const Limits& limits) {
  auto it = Filters().find(name);
  if (it == Filters().end()) return FilterError("No filter named '" + name + "'.");
  return it->second(input, args, limits);
}

}  // namespace shardlm::jinja
