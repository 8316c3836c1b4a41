#include "jinja/jinja_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "jinja/jinja_methods.h"
#include "jinja/py_string.h"

namespace shardlm::jinja {
namespace {

absl::Status TypeError(const std::string& message) { return absl::InvalidArgumentError(message); }

const char* OpSymbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return "+";
    case BinaryOp::kSub:
      return "-";
    case BinaryOp::kMul:
      return "*";
    case BinaryOp::kDiv:
      return "/";
    case BinaryOp::kFloorDiv:
      return "//";
    case BinaryOp::kMod:
      return "%";
    case BinaryOp::kPow:
      return "**";
    case BinaryOp::kConcat:
      return "~";
  }
  return "?";
}

absl::Status Unsupported(BinaryOp op, const Value& a, const Value& b) {
  return TypeError(absl::StrCat("unsupported operand type(s) for ", OpSymbol(op), ": '", TypeName(a),
                                "' and '", TypeName(b), "'"));
}

absl::Status TooBig(const Limits& limits) {
  return absl::InvalidArgumentError(absl::StrCat("result too large: over the template limit of ",
                                                 limits.max_output_bytes, " bytes or ", limits.max_items,
                                                 " items"));
}

absl::StatusOr<Value> CheckedInt(bool overflow, int64_t v) {
  if (overflow) return absl::InvalidArgumentError("integer overflow (beyond 64 bits)");
  return Value::Int(v);
}

absl::StatusOr<Value> Repeat(const Value& seq, int64_t n, const Limits& limits) {
  n = std::max<int64_t>(n, 0);
  if (seq.is_string()) {
    const auto len = static_cast<int64_t>(seq.string_value().size());
    if (len > 0 && n > limits.max_output_bytes / len) return TooBig(limits);
    std::string out;
    out.reserve(len * n);
    for (int64_t i = 0; i < n; ++i) out += seq.string_value();
    return Value::String(std::move(out));
  }
  const auto len = static_cast<int64_t>(seq.items().size());
  if (len > 0 && n > limits.max_items / len) return TooBig(limits);
  std::vector<Value> out;
  out.reserve(len * n);
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.kind() == Value::Kind::kTuple ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
}

absl::StatusOr<Value> Add(const Value& a, const Value& b, const Limits& limits) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) {
      int64_t r;
      const bool overflow = __builtin_add_overflow(a.int_value(), b.int_value(), &r);
      return CheckedInt(overflow, r);
    }
    return Value::Float(a.number_value() + b.number_value());
  }
  if (a.is_string() && b.is_string()) {
    if (static_cast<int64_t>(a.string_value().size() + b.string_value().size()) > limits.max_output_bytes) {
      return TooBig(limits);
    }
    return Value::String(a.string_value() + b.string_value());
  }
  if (a.is_sequence() && a.kind() == b.kind()) {
    if (static_cast<int64_t>(a.items().size() + b.items().size()) > limits.max_items) return TooBig(limits);
    std::vector<Value> out = a.items();
    out.insert(out.end(), b.items().begin(), b.items().end());
    return a.kind() == Value::Kind::kTuple ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
  }
  if (a.is_string() || a.is_sequence()) {
    return TypeError(
        absl::StrCat("can only concatenate ", TypeName(a), " (not \"", TypeName(b), "\") to ", TypeName(a)));
  }
  return Unsupported(BinaryOp::kAdd, a, b);
}

absl::StatusOr<Value> Multiply(const Value& a, const Value& b, const Limits& limits) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) {
      int64_t r;
      const bool overflow = __builtin_mul_overflow(a.int_value(), b.int_value(), &r);
      return CheckedInt(overflow, r);
    }
    return Value::Float(a.number_value() * b.number_value());
  }
  const bool a_seq = a.is_string() || a.is_sequence();
  const bool b_seq = b.is_string() || b.is_sequence();
  if (a_seq && b.is_integral()) return Repeat(a, b.int_value(), limits);
  if (b_seq && a.is_integral()) return Repeat(b, a.int_value(), limits);
  if (a_seq || b_seq) {
    return TypeError(
        absl::StrCat("can't multiply sequence by non-int of type '", TypeName(a_seq ? b : a), "'"));
  }
  return Unsupported(BinaryOp::kMul, a, b);
}

absl::StatusOr<Value> Power(const Value& a, const Value& b) {
  if (a.is_integral() && b.is_integral() && b.int_value() >= 0) {
    int64_t result = 1, base = a.int_value(), exp = b.int_value();
    bool overflow = false;
    while (exp > 0 && !overflow) {
      if (exp & 1) overflow |= __builtin_mul_overflow(result, base, &result);
      exp >>= 1;
      if (exp > 0) overflow |= __builtin_mul_overflow(base, base, &base);
    }
    return CheckedInt(overflow, result);
  }
  const double x = a.number_value(), y = b.number_value();
  if (x == 0 && y < 0) return absl::InvalidArgumentError("0.0 cannot be raised to a negative power");
  if (x < 0 && y != std::floor(y))
    return absl::InvalidArgumentError("a negative number to a fractional power");
  return Value::Float(std::pow(x, y));
}

absl::StatusOr<Value> Divide(BinaryOp op, const Value& a, const Value& b) {
  if (a.is_integral() && b.is_integral() && op != BinaryOp::kDiv) {
    const int64_t x = a.int_value(), y = b.int_value();
    if (y == 0) return absl::InvalidArgumentError("integer division or modulo by zero");
    if (x == INT64_MIN && y == -1) return CheckedInt(true, 0);
    int64_t q = x / y, r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) {
      --q;
      r += y;
    }
    return Value::Int(op == BinaryOp::kFloorDiv ? q : r);
  }
  const double x = a.number_value(), y = b.number_value();
  if (y == 0) {
    return absl::InvalidArgumentError(op == BinaryOp::kDiv ? "division by zero"
                                                           : "float modulo or division by zero");
  }
  if (op == BinaryOp::kDiv) return Value::Float(x / y);
  double r = std::fmod(x, y);
  if (r != 0 && ((r < 0) != (y < 0))) r += y;
  if (r == 0) r = std::copysign(0.0, y);
  if (op == BinaryOp::kMod) return Value::Float(r);
  return Value::Float(std::round((x - r) / y));
}

// One printf-style conversion of Python's str % operator.
absl::StatusOr<std::string> FormatOne(char conv, const std::string& flags, int width, int precision,
                                      const Value& v) {
  std::string body;
  if (conv == 's' || conv == 'r' || conv == 'a') {
    body = conv == 's' ? ToStr(v) : Repr(v);
    if (precision >= 0) body = py::Encode(py::Decode(body).substr(0, precision));
    const int64_t pad = width - py::Length(body);
    if (pad > 0) {
      const std::string fill(pad, ' ');
      body = flags.find('-') != std::string::npos ? body + fill : fill + body;
    }
    return body;
  }
  if (conv == 'c') {
    if (v.is_string() && py::Length(v.string_value()) == 1) return v.string_value();
    if (!v.is_integral()) return TypeError("%c requires an int or a unicode character");
    std::string s;
    py::AppendUtf8(static_cast<char32_t>(v.int_value()), &s);
    return s;
  }
  if (!v.is_number()) {
    return TypeError(
        absl::StrCat("%", std::string(1, conv), " format: a real number is required, not ", TypeName(v)));
  }
  std::string spec = "%" + flags;
  if (width >= 0) spec += std::to_string(width);
  if (precision >= 0) spec += "." + std::to_string(precision);
  char buf[512];
  if (conv == 'd' || conv == 'i' || conv == 'u' || conv == 'x' || conv == 'X' || conv == 'o') {
    const long long i = v.is_integral() ? v.int_value() : static_cast<long long>(v.number_value());
    const char c = conv == 'i' || conv == 'u' ? 'd' : conv;
    if ((c == 'x' || c == 'X' || c == 'o') && i < 0) {
      spec += std::string("ll") + c;
      std::snprintf(buf, sizeof(buf), spec.c_str(), static_cast<unsigned long long>(-i));
      return "-" + std::string(buf);
    }
    spec += std::string("ll") + c;
    std::snprintf(buf, sizeof(buf), spec.c_str(), i);
    return std::string(buf);
  }
  spec.push_back(conv);
  std::snprintf(buf, sizeof(buf), spec.c_str(), v.number_value());
  return std::string(buf);
}

}  // namespace

absl::Status UndefinedError(const Value& v) {
  const std::string& hint = v.undefined_hint();
  return absl::InvalidArgumentError(hint.empty() ? "undefined value" : hint);
}

absl::StatusOr<Value> GetAttr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (std::optional<Value> method = BoundMethod(obj, name)) return *method;
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().Find(name)) return *v;
  } else if (obj.is_object()) {
    if (const Value* v = obj.object().attributes.Find(name)) return *v;
  }
  return Value::Undefined(absl::StrCat("'", ObjectTypeRepr(obj), "' has no attribute '", name, "'"));
}

absl::StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().Find(key)) return *v;
  } else if ((obj.is_sequence() || obj.is_string()) && key.is_integral()) {
    const int64_t len = obj.is_string() ? py::Length(obj.string_value()) : obj.items().size();
    int64_t i = key.int_value();
    if (i < 0) i += len;
    if (i >= 0 && i < len) {
      if (!obj.is_string()) return obj.items()[i];
      const std::string& s = obj.string_value();
      if (py::IsAscii(s)) return Value::String(s.substr(i, 1));
      std::string ch;
      py::AppendUtf8(py::Decode(s)[i], &ch);
      return Value::String(std::move(ch));
    }
  }
  if (key.is_string()) return GetAttr(obj, key.string_value());
  return Value::Undefined(absl::StrCat(ObjectTypeRepr(obj), " has no element ", Repr(key)));
}

absl::StatusOr<Value> GetSlice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) return UndefinedError(obj);
  auto bound = [](const Value& v) -> absl::StatusOr<std::optional<int64_t>> {
    if (v.is_undefined() || v.is_none()) return std::optional<int64_t>();
    if (!v.is_integral())
      return TypeError("slice indices must be integers or None or have an __index__ method");
    return std::optional<int64_t>(v.int_value());
  };
  SHARDLM_ASSIGN_OR_RETURN(std::optional<int64_t> lo, bound(start));
  SHARDLM_ASSIGN_OR_RETURN(std::optional<int64_t> hi, bound(stop));
  SHARDLM_ASSIGN_OR_RETURN(std::optional<int64_t> by, bound(step));
  if (by && *by == 0) return absl::InvalidArgumentError("slice step cannot be zero");
  if (obj.is_string()) {
    const std::string& s = obj.string_value();
    if (py::IsAscii(s)) {
      std::string out;
      for (int64_t i : py::SliceIndices(s.size(), lo, hi, by.value_or(1))) out.push_back(s[i]);
      return Value::String(std::move(out));
    }
    const std::u32string cps = py::Decode(s);
    std::u32string out;
    for (int64_t i : py::SliceIndices(cps.size(), lo, hi, by.value_or(1))) out.push_back(cps[i]);
    return Value::String(py::Encode(out));
  }
  if (obj.is_sequence()) {
    std::vector<Value> out;
    for (int64_t i : py::SliceIndices(obj.items().size(), lo, hi, by.value_or(1)))
      out.push_back(obj.items()[i]);
    return obj.kind() == Value::Kind::kTuple ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
  }
  return Value::Undefined(absl::StrCat(ObjectTypeRepr(obj), " has no element slice"));
}

absl::StatusOr<std::vector<Value>> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return std::vector<Value>();
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return v.items();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      keys.reserve(v.dict().size());
      for (const auto& [k, item] : v.dict().entries()) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      const std::string& s = v.string_value();
      size_t pos = 0;
      while (pos < s.size()) {
        const size_t start = pos;
        py::NextCodePoint(s, &pos);
        chars.push_back(Value::String(s.substr(start, pos - start)));
      }
      return chars;
    }
    default:
      return TypeError(absl::StrCat("'", TypeName(v), "' object is not iterable"));
  }
}

absl::StatusOr<int64_t> Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return py::Length(v.string_value());
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return static_cast<int64_t>(v.items().size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.dict().size());
    default:
      return TypeError(absl::StrCat("object of type '", TypeName(v), "' has no len()"));
  }
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        return TypeError(absl::StrCat("'in <string>' requires string as left operand, not ", TypeName(item)));
      }
      return container.string_value().find(item.string_value()) != std::string::npos;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return std::any_of(container.items().begin(), container.items().end(),
                         [&](const Value& v) { return Equals(v, item); });
    case Value::Kind::kDict:
      return container.dict().Find(item) != nullptr;
    default:
      return TypeError(absl::StrCat("argument of type '", TypeName(container), "' is not iterable"));
  }
}

absl::StatusOr<Value> Arithmetic(BinaryOp op, const Value& a, const Value& b, const Limits& limits) {
  if (op == BinaryOp::kConcat) {
    std::string s = ToStr(a);
    s += ToStr(b);
    if (static_cast<int64_t>(s.size()) > limits.max_output_bytes) return TooBig(limits);
    return Value::String(std::move(s));
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  switch (op) {
    case BinaryOp::kAdd:
      return Add(a, b, limits);
    case BinaryOp::kMul:
      return Multiply(a, b, limits);
    case BinaryOp::kMod:
      if (a.is_string()) {
        SHARDLM_ASSIGN_OR_RETURN(std::string s, PercentFormat(a.string_value(), b));
        if (static_cast<int64_t>(s.size()) > limits.max_output_bytes) return TooBig(limits);
        return Value::String(std::move(s));
      }
      break;
    default:
      break;
  }
  if (!a.is_number() || !b.is_number()) return Unsupported(op, a, b);
  switch (op) {
    case BinaryOp::kSub:
      if (a.is_integral() && b.is_integral()) {
        int64_t r;
        const bool overflow = __builtin_sub_overflow(a.int_value(), b.int_value(), &r);
        return CheckedInt(overflow, r);
      }
      return Value::Float(a.number_value() - b.number_value());
    case BinaryOp::kPow:
      return Power(a, b);
    default:
      return Divide(op, a, b);
  }
}

absl::StatusOr<Value> Negate(const Value& v, bool minus) {
  if (v.is_undefined()) return UndefinedError(v);
  if (!v.is_number()) {
    return TypeError(absl::StrCat("bad operand type for unary ", minus ? "-" : "+", ": '", TypeName(v), "'"));
  }
  if (!minus) return v.is_bool() ? Value::Int(v.int_value()) : v;
  if (v.is_integral()) return CheckedInt(v.int_value() == INT64_MIN, -v.int_value());
  return Value::Float(-v.number_value());
}

absl::StatusOr<std::string> PercentFormat(const std::string& fmt, const Value& args) {
  const bool mapping = args.is_dict();
  std::vector<Value> values;
  if (args.kind() == Value::Kind::kTuple) {
    values = args.items();
  } else if (!mapping) {
    values.push_back(args);
  }
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) return absl::InvalidArgumentError("incomplete format");
    if (fmt[i] == '%') {
      out.push_back('%');
      continue;
    }
    const Value* value = nullptr;
    if (fmt[i] == '(') {
      const size_t close = fmt.find(')', i);
      if (close == std::string::npos) return absl::InvalidArgumentError("incomplete format key");
      if (!mapping) return TypeError("format requires a mapping");
      value = args.dict().Find(fmt.substr(i + 1, close - i - 1));
      if (value == nullptr)
        return absl::InvalidArgumentError("KeyError: " + fmt.substr(i + 1, close - i - 1));
      used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos)
      flags += fmt[i++];
    int width = -1, precision = -1;
    while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9')
      width = std::max(width, 0) * 10 + (fmt[i++] - '0');
    if (i < fmt.size() && fmt[i] == '.') {
      precision = 0;
      ++i;
      while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') precision = precision * 10 + (fmt[i++] - '0');
    }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) return absl::InvalidArgumentError("incomplete format");
    const char conv = fmt[i];
    if (std::string_view("sradiuxXoeEfFgGc").find(conv) == std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported format character '", std::string(1, conv), "'"));
    }
    if (width > 10000 || precision > 10000) return absl::InvalidArgumentError("format width too large");
    if (value == nullptr) {
      if (mapping) {
        value = &args;
      } else {
        if (next >= values.size()) return TypeError("not enough arguments for format string");
        value = &values[next++];
      }
    }
    SHARDLM_ASSIGN_OR_RETURN(std::string piece, FormatOne(conv, flags, width, precision, *value));
    out += piece;
  }
  if (!mapping && next < values.size()) {
    return TypeError("not all arguments converted during string formatting");
  }
  (void)used_mapping;
  return out;
}

absl::Status BindArgs(std::string_view function, const CallArgs& args,
                      std::initializer_list<std::string_view> params, std::vector<Value>* out) {
  out->assign(params.size(), Value());
  if (args.positional.size() > params.size()) {
    return TypeError(absl::StrCat(std::string(function), "() takes at most ", params.size(), " argument(s) (",
                                  args.positional.size(), " given)"));
  }
  for (size_t i = 0; i < args.positional.size(); ++i) (*out)[i] = args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    const auto it = std::find(params.begin(), params.end(), key);
    if (it == params.end()) {
      return TypeError(
          absl::StrCat(std::string(function), "() got an unexpected keyword argument '", key, "'"));
    }
    const auto index = static_cast<size_t>(it - params.begin());
    if (index < args.positional.size()) {
      return TypeError(
          absl::StrCat(std::string(function), "() got multiple values for argument '", key, "'"));
    }
    (*out)[index] = value;
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> IntArg(std::string_view function, const Value& v, int64_t fallback) {
  if (v.is_undefined() || v.is_none()) return fallback;
  if (!v.is_integral()) {
    return TypeError(absl::StrCat(std::string(function), "(): '", TypeName(v),
                                  "' object cannot be interpreted as an integer"));
  }
  return v.int_value();
}

absl::StatusOr<std::optional<std::string>> StringArg(std::string_view function, const Value& v) {
  if (v.is_undefined() || v.is_none()) return std::optional<std::string>();
  if (!v.is_string()) {
    return TypeError(
        absl::StrCat(std::string(function), "() argument must be str or None, not ", TypeName(v)));
  }
  return std::optional<std::string>(v.string_value());
}

}  // namespace shardlm::jinja
