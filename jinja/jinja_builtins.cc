// Jinja's tests and global functions (the filters are in jinja_filters.cc).
#include "jinja/jinja_builtins.h"

#include <sys/time.h>

#include <algorithm>
#include <ctime>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "jinja/jinja_methods.h"
#include "jinja/jinja_ops.h"

namespace shardlm::jinja {
namespace {

using TestFn = absl::StatusOr<bool> (*)(const Value& v, const CallArgs& args);

// Binds a test's arguments (after the tested value).
absl::StatusOr<std::vector<Value>> TestArgs(const char* name, const CallArgs& args,
                                            std::initializer_list<std::string_view> params) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs(name, args, params, &a));
  return a;
}

absl::StatusOr<bool> ModuloIs(const Value& v, const Value& divisor, int64_t remainder) {
  SHARDLM_ASSIGN_OR_RETURN(Value r, Arithmetic(BinaryOp::kMod, v, divisor, Limits{}));
  return Equals(r, Value::Int(remainder));
}

absl::StatusOr<bool> Ordered(const Value& v, const CallArgs& args, bool (*accept)(int)) {
  SHARDLM_ASSIGN_OR_RETURN(auto a, TestArgs("compare", args, {"other"}));
  SHARDLM_ASSIGN_OR_RETURN(int c, Compare(v, a[0]));
  return accept(c);
}

absl::StatusOr<bool> Kind(const Value& v, const CallArgs& args, bool result) {
  SHARDLM_ASSIGN_OR_RETURN(auto a, TestArgs("test", args, {}));
  (void)v;
  return result;
}

absl::StatusOr<bool> CaseTest(const Value& v, const CallArgs& args, const char* method) {
  SHARDLM_ASSIGN_OR_RETURN(auto a, TestArgs(method, args, {}));
  SHARDLM_ASSIGN_OR_RETURN(Value r, BoundMethod(Value::String(ToStr(v)), method)->function()(CallArgs{}));
  return r.bool_value();
}

// Python's `is`: singletons and small ints compare by value, everything else
// by identity of the shared object.
bool SameAs(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kNone:
    case Value::Kind::kUndefined:
      return true;
    case Value::Kind::kBool:
      return a.bool_value() == b.bool_value();
    case Value::Kind::kInt:
      return a.int_value() == b.int_value() && a.int_value() >= -5 && a.int_value() <= 256;
    case Value::Kind::kString:
      return &a.string_value() == &b.string_value();
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return &a.items() == &b.items();
    case Value::Kind::kDict:
      return &a.dict() == &b.dict();
    default:
      return Equals(a, b);
  }
}

#define SHARDLM_TEST(name, expr)                                                            \
  {                                                                                         \
    name, [](const Value& v, const CallArgs& args) -> absl::StatusOr<bool> { return expr; } \
  }

// The tests that take arguments.
absl::StatusOr<bool> SameAsTest(const Value& v, const CallArgs& args) {
  SHARDLM_ASSIGN_OR_RETURN(auto a, TestArgs("sameas", args, {"other"}));
  return SameAs(v, a[0]);
}

absl::StatusOr<bool> InTest(const Value& v, const CallArgs& args) {
  SHARDLM_ASSIGN_OR_RETURN(auto a, TestArgs("in", args, {"seq"}));
  return Contains(a[0], v);
}

absl::StatusOr<bool> OddTest(const Value& v, const CallArgs& args) {
  SHARDLM_ASSIGN_OR_RETURN(auto a, TestArgs("odd", args, {}));
  return ModuloIs(v, Value::Int(2), 1);
}

absl::StatusOr<bool> EvenTest(const Value& v, const CallArgs& args) {
  SHARDLM_ASSIGN_OR_RETURN(auto a, TestArgs("even", args, {}));
  return ModuloIs(v, Value::Int(2), 0);
}

absl::StatusOr<bool> DivisibleByTest(const Value& v, const CallArgs& args) {
  SHARDLM_ASSIGN_OR_RETURN(auto a, TestArgs("divisibleby", args, {"num"}));
  return ModuloIs(v, a[0], 0);
}

absl::StatusOr<bool> EqualTest(const Value& v, const CallArgs& args) {
  SHARDLM_ASSIGN_OR_RETURN(auto a, TestArgs("eq", args, {"other"}));
  return Equals(v, a[0]);
}

absl::StatusOr<bool> NotEqualTest(const Value& v, const CallArgs& args) {
  SHARDLM_ASSIGN_OR_RETURN(auto a, TestArgs("ne", args, {"other"}));
  return !Equals(v, a[0]);
}

const std::map<std::string_view, TestFn>& Tests() {
  static const auto* tests = new std::map<std::string_view, TestFn>{
      SHARDLM_TEST("defined", Kind(v, args, !v.is_undefined())),
      SHARDLM_TEST("undefined", Kind(v, args, v.is_undefined())),
      SHARDLM_TEST("none", Kind(v, args, v.is_none())),
      SHARDLM_TEST("boolean", Kind(v, args, v.is_bool())),
      SHARDLM_TEST("false", Kind(v, args, v.is_bool() && !v.bool_value())),
      SHARDLM_TEST("true", Kind(v, args, v.is_bool() && v.bool_value())),
      SHARDLM_TEST("integer", Kind(v, args, v.is_int())),
      SHARDLM_TEST("float", Kind(v, args, v.kind() == Value::Kind::kFloat)),
      SHARDLM_TEST("number", Kind(v, args, v.is_number())),
      SHARDLM_TEST("string", Kind(v, args, v.is_string())),
      SHARDLM_TEST("mapping", Kind(v, args, v.is_dict())),
      SHARDLM_TEST("iterable", Kind(v, args,
                                    v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict() ||
                                        (v.is_object() && v.object().type_name == "LoopContext"))),
      SHARDLM_TEST("sequence",
                   Kind(v, args, v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict())),
      SHARDLM_TEST("callable", Kind(v, args,
                                    v.is_callable() || v.is_undefined() ||
                                        (v.is_object() && v.object().type_name == "LoopContext"))),
      SHARDLM_TEST("escaped", Kind(v, args, false)),
      SHARDLM_TEST("filter", Kind(v, args, v.is_string() && IsKnownFilter(v.string_value()))),
      SHARDLM_TEST("test", Kind(v, args, v.is_string() && IsKnownTest(v.string_value()))),
      {"sameas", SameAsTest},
      {"in", InTest},
      {"odd", OddTest},
      {"even", EvenTest},
      {"divisibleby", DivisibleByTest},
      SHARDLM_TEST("lower", CaseTest(v, args, "islower")),
      SHARDLM_TEST("upper", CaseTest(v, args, "isupper")),
      {"==", EqualTest},
      {"!=", NotEqualTest},
      SHARDLM_TEST("<", Ordered(v, args, [](int c) { return c < 0; })),
      SHARDLM_TEST("<=", Ordered(v, args, [](int c) { return c <= 0; })),
      SHARDLM_TEST(">", Ordered(v, args, [](int c) { return c > 0; })),
      SHARDLM_TEST(">=", Ordered(v, args, [](int c) { return c >= 0; })),
  };
  return *tests;
}

// Jinja's other names for the comparison tests.
std::string_view CanonicalTest(std::string_view name) {
  static const auto* aliases = new std::map<std::string_view, std::string_view>{
      {"eq", "=="}, {"equalto", "=="}, {"ne", "!="},         {"lt", "<"},  {"lessthan", "<"},
      {"le", "<="}, {"gt", ">"},       {"greaterthan", ">"}, {"ge", ">="},
  };
  auto it = aliases->find(name);
  return it == aliases->end() ? name : it->second;
}

// dict(*args, **kwargs): at most one mapping or iterable of pairs, then the keywords.
absl::StatusOr<Dict> DictFromArgs(const char* name, const CallArgs& args) {
  if (args.positional.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "() expected at most 1 argument, got ", args.positional.size()));
  }
  Dict dict;
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (source.is_dict()) {
      dict = source.dict();
    } else {
      SHARDLM_ASSIGN_OR_RETURN(std::vector<Value> pairs, Iterate(source));
      for (const Value& pair : pairs) {
        SHARDLM_ASSIGN_OR_RETURN(std::vector<Value> kv, Iterate(pair));
        if (kv.size() != 2) {
          return absl::InvalidArgumentError(
              absl::StrCat(name, "(): sequence elements must have length 2, not ", kv.size()));
        }
        dict.Set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [k, v] : args.keyword) dict.Set(Value::String(k), v);
  return dict;
}

absl::StatusOr<Value> Range(const CallArgs& args) {
  if (!args.keyword.empty()) return absl::InvalidArgumentError("range() takes no keyword arguments");
  if (args.positional.empty() || args.positional.size() > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("range expected 1 to 3 arguments, got ", args.positional.size()));
  }
  std::vector<int64_t> n;
  for (const Value& v : args.positional) {
    if (!v.is_integral()) {
      return absl::InvalidArgumentError("'" + TypeName(v) + "' object cannot be interpreted as an integer");
    }
    n.push_back(v.int_value());
  }
  const int64_t start = n.size() == 1 ? 0 : n[0];
  const int64_t stop = n.size() == 1 ? n[0] : n[1];
  const int64_t step = n.size() == 3 ? n[2] : 1;
  if (step == 0) return absl::InvalidArgumentError("range() arg 3 must not be zero");
  // Jinja's sandbox refuses ranges longer than MAX_RANGE = 100000.
  constexpr int64_t kMaxRange = 100000;
  const long double count = step > 0 ? std::ceil((static_cast<long double>(stop) - start) / step)
                                     : std::ceil((static_cast<long double>(start) - stop) / -step);
  if (count > kMaxRange) {
    return absl::InvalidArgumentError(
        "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  }
  std::vector<Value> items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) items.push_back(Value::Int(i));
  return Value::List(std::move(items));
}

// datetime.now().strftime(format): libc strftime on local time, plus Python's %f.
absl::StatusOr<Value> StrftimeNow(const CallArgs& args) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("strftime_now", args, {"format"}, &a));
  if (!a[0].is_string()) return absl::InvalidArgumentError("strftime_now() argument must be str");
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  struct tm local;
  localtime_r(&tv.tv_sec, &local);
  std::string format;
  const std::string& f = a[0].string_value();
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] == '%' && i + 1 < f.size() && f[i + 1] == 'f') {
      char micros[8];
      std::snprintf(micros, sizeof(micros), "%06ld", static_cast<long>(tv.tv_usec));
      format += micros;
      ++i;
    } else {
      format.push_back(f[i]);
      if (f[i] == '%' && i + 1 < f.size()) format.push_back(f[++i]);
    }
  }
  if (format.empty()) return Value::String("");
  std::vector<char> buf(256 + format.size() * 16);
  const size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &local);
  return Value::String(std::string(buf.data(), n));
}

}  // namespace

bool IsKnownTest(std::string_view name) { return Tests().count(CanonicalTest(name)) > 0; }

absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& input, const CallArgs& args) {
  auto it = Tests().find(CanonicalTest(name));
  if (it == Tests().end()) return absl::InvalidArgumentError("No test named '" + name + "'.");
  return it->second(input, args);
}

Value BuiltinGlobal(const std::string& name) {
  if (name == "range") return Value::Callable("range", Range);
  if (name == "strftime_now") return Value::Callable("strftime_now", StrftimeNow);
  if (name == "dict") {
    return Value::Callable("dict", [](const CallArgs& args) -> absl::StatusOr<Value> {
      SHARDLM_ASSIGN_OR_RETURN(Dict d, DictFromArgs("dict", args));
      return Value::MakeDict(std::move(d));
    });
  }
  if (name == "namespace") {
    return Value::Callable("namespace", [](const CallArgs& args) -> absl::StatusOr<Value> {
      SHARDLM_ASSIGN_OR_RETURN(Dict d, DictFromArgs("namespace", args));
      auto ns = std::make_shared<Object>();
      ns->type_name = "Namespace";
      ns->attributes = std::move(d);
      return Value::MakeObject(std::move(ns));
    });
  }
  return Value::Undefined("'" + name + "' is undefined");
}

}  // namespace shardlm::jinja
