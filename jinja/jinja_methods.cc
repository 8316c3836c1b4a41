#include "jinja/jinja_methods.h"

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "jinja/jinja_ops.h"
#include "jinja/py_format.h"
#include "jinja/py_string.h"

namespace shardlm::jinja {
namespace {

using Method = absl::StatusOr<Value> (*)(const Value& self, const CallArgs& args);

absl::Status ValueError(const std::string& message) { return absl::InvalidArgumentError(message); }

// ---- str methods ----

// CPython's ADJUST_INDICES for find/count/startswith: negative indices count
// from the end; `end` is clamped to the length but `start` may stay past it.
void StartEnd(int64_t len, int64_t* start, int64_t* end) {
  if (*end > len) {
    *end = len;
  } else if (*end < 0) {
    *end = std::max<int64_t>(*end + len, 0);
  }
  if (*start < 0) *start = std::max<int64_t>(*start + len, 0);
}

const std::string& Self(const Value& self) { return self.string_value(); }

absl::StatusOr<Value> CaseMethod(const Value& self, const CallArgs& args, std::string (*fn)(std::string_view),
                                 const char* name) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs(name, args, {}, &a));
  return Value::String(fn(Self(self)));
}

absl::StatusOr<Value> StripMethod(const Value& self, const CallArgs& args, bool left, bool right) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("strip", args, {"chars"}, &a));
  SHARDLM_ASSIGN_OR_RETURN(std::optional<std::string> chars, StringArg("strip", a[0]));
  return Value::String(py::Strip(Self(self), chars, left, right));
}

absl::StatusOr<Value> SplitMethod(const Value& self, const CallArgs& args, bool reverse) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("split", args, {"sep", "maxsplit"}, &a));
  SHARDLM_ASSIGN_OR_RETURN(std::optional<std::string> sep, StringArg("split", a[0]));
  SHARDLM_ASSIGN_OR_RETURN(int64_t maxsplit, IntArg("split", a[1], -1));
  if (sep && sep->empty()) return ValueError("empty separator");
  std::vector<Value> parts;
  for (std::string& p :
       reverse ? py::RSplit(Self(self), sep, maxsplit) : py::Split(Self(self), sep, maxsplit)) {
    parts.push_back(Value::String(std::move(p)));
  }
  return Value::List(std::move(parts));
}

absl::StatusOr<Value> AffixMethod(const Value& self, const CallArgs& args, bool suffix) {
  const char* name = suffix ? "endswith" : "startswith";
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs(name, args, {"prefix", "start", "end"}, &a));
  const std::u32string cps = py::Decode(Self(self));
  const auto len = static_cast<int64_t>(cps.size());
  SHARDLM_ASSIGN_OR_RETURN(int64_t start, IntArg(name, a[1], 0));
  SHARDLM_ASSIGN_OR_RETURN(int64_t end, IntArg(name, a[2], len));
  StartEnd(len, &start, &end);
  std::vector<Value> candidates =
      a[0].kind() == Value::Kind::kTuple ? a[0].items() : std::vector<Value>{a[0]};
  for (const Value& c : candidates) {
    if (!c.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " first arg must be str or a tuple of str, not ", TypeName(c)));
    }
    const std::u32string affix = py::Decode(c.string_value());
    const auto n = static_cast<int64_t>(affix.size());
    if (end - start < n) continue;
    const int64_t at = suffix ? end - n : start;
    if (cps.compare(at, n, affix) == 0) return Value::Bool(true);
  }
  return Value::Bool(false);
}

absl::StatusOr<Value> FindMethod(const Value& self, const CallArgs& args, bool reverse, bool raise) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("find", args, {"sub", "start", "end"}, &a));
  if (!a[0].is_string()) return absl::InvalidArgumentError("must be str, not " + TypeName(a[0]));
  const int64_t len = py::Length(Self(self));
  SHARDLM_ASSIGN_OR_RETURN(int64_t start, IntArg("find", a[1], 0));
  SHARDLM_ASSIGN_OR_RETURN(int64_t end, IntArg("find", a[2], len));
  StartEnd(len, &start, &end);
  int64_t hit = -1;
  if (start <= end) hit = py::Find(Self(self), a[0].string_value(), start, end, reverse);
  if (hit < 0 && raise) return ValueError("substring not found");
  return Value::Int(hit);
}

absl::StatusOr<Value> StrCount(const Value& self, const CallArgs& args) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("count", args, {"sub", "start", "end"}, &a));
  if (!a[0].is_string()) return absl::InvalidArgumentError("must be str, not " + TypeName(a[0]));
  const std::u32string cps = py::Decode(Self(self));
  const auto len = static_cast<int64_t>(cps.size());
  SHARDLM_ASSIGN_OR_RETURN(int64_t start, IntArg("count", a[1], 0));
  SHARDLM_ASSIGN_OR_RETURN(int64_t end, IntArg("count", a[2], len));
  StartEnd(len, &start, &end);
  if (start > end) return Value::Int(0);
  return Value::Int(
      py::Count(py::Encode(std::u32string_view(cps).substr(start, end - start)), a[0].string_value()));
}

absl::StatusOr<Value> StrReplace(const Value& self, const CallArgs& args) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("replace", args, {"old", "new", "count"}, &a));
  if (!a[0].is_string() || !a[1].is_string())
    return absl::InvalidArgumentError("replace() arguments must be str");
  SHARDLM_ASSIGN_OR_RETURN(int64_t count, IntArg("replace", a[2], -1));
  return Value::String(py::Replace(Self(self), a[0].string_value(), a[1].string_value(), count));
}

absl::StatusOr<Value> StrJoin(const Value& self, const CallArgs& args) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("join", args, {"iterable"}, &a));
  SHARDLM_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(a[0]));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence item ", i, ": expected str instance, ", TypeName(items[i]), " found"));
    }
    if (i > 0) out += Self(self);
    out += items[i].string_value();
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> StrFormatMethod(const Value& self, const CallArgs& args) {
  SHARDLM_ASSIGN_OR_RETURN(std::string s, PyFormat(Self(self), args));
  return Value::String(std::move(s));
}

absl::StatusOr<Value> StrSplitLines(const Value& self, const CallArgs& args) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("splitlines", args, {"keepends"}, &a));
  std::vector<Value> lines;
  for (std::string& line : py::SplitLines(Self(self), Truthy(a[0])))
    lines.push_back(Value::String(std::move(line)));
  return Value::List(std::move(lines));
}

absl::StatusOr<Value> CharTest(const Value& self, const CallArgs& args, bool (*pred)(char32_t)) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("is...", args, {}, &a));
  const std::u32string cps = py::Decode(Self(self));
  return Value::Bool(!cps.empty() && std::all_of(cps.begin(), cps.end(), pred));
}

absl::StatusOr<Value> CaseTest(const Value& self, const CallArgs& args, bool upper) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs(upper ? "isupper" : "islower", args, {}, &a));
  bool cased = false;
  for (char32_t c : py::Decode(Self(self))) {
    if (upper ? py::IsLowerCased(c) : py::IsUpperCased(c)) return Value::Bool(false);
    cased |= upper ? py::IsUpperCased(c) : py::IsLowerCased(c);
  }
  return Value::Bool(cased);
}

absl::StatusOr<Value> JustifyMethod(const Value& self, const CallArgs& args, char align) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("center", args, {"width", "fillchar"}, &a));
  SHARDLM_ASSIGN_OR_RETURN(int64_t width, IntArg("center", a[0], 0));
  if (width > (int64_t{1} << 24)) return absl::InvalidArgumentError("width too large");
  char32_t fill = ' ';
  if (!a[1].is_undefined()) {
    if (!a[1].is_string() || py::Length(a[1].string_value()) != 1) {
      return absl::InvalidArgumentError("The fill character must be exactly one character long");
    }
    fill = py::Decode(a[1].string_value())[0];
  }
  const std::string& s = Self(self);
  if (align == '^') {
    // CPython's centering puts the odd pad character on the left when width is odd.
    const int64_t pad = width - py::Length(s);
    if (pad <= 0) return Value::String(s);
    const int64_t left = pad / 2 + (pad & width & 1);
    std::string f;
    py::AppendUtf8(fill, &f);
    std::string out;
    for (int64_t i = 0; i < left; ++i) out += f;
    out += s;
    for (int64_t i = 0; i < pad - left; ++i) out += f;
    return Value::String(std::move(out));
  }
  return Value::String(PadTo(s, width, fill, align));
}

absl::StatusOr<Value> StrZfill(const Value& self, const CallArgs& args) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("zfill", args, {"width"}, &a));
  SHARDLM_ASSIGN_OR_RETURN(int64_t width, IntArg("zfill", a[0], 0));
  if (width > (int64_t{1} << 24)) return absl::InvalidArgumentError("width too large");
  std::string s = Self(self);
  const int64_t pad = width - py::Length(s);
  if (pad <= 0) return Value::String(s);
  const size_t at = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
  s.insert(at, std::string(pad, '0'));
  return Value::String(std::move(s));
}

absl::StatusOr<Value> PartitionMethod(const Value& self, const CallArgs& args, bool reverse) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("partition", args, {"sep"}, &a));
  if (!a[0].is_string()) return absl::InvalidArgumentError("must be str, not " + TypeName(a[0]));
  const std::string& s = Self(self);
  const std::string& sep = a[0].string_value();
  if (sep.empty()) return ValueError("empty separator");
  const size_t hit = reverse ? s.rfind(sep) : s.find(sep);
  if (hit == std::string::npos) {
    const Value empty = Value::String("");
    return Value::Tuple(reverse ? std::vector<Value>{empty, empty, self}
                                : std::vector<Value>{self, empty, empty});
  }
  return Value::Tuple({Value::String(s.substr(0, hit)), a[0], Value::String(s.substr(hit + sep.size()))});
}

absl::StatusOr<Value> RemoveAffix(const Value& self, const CallArgs& args, bool suffix) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("removeprefix", args, {"affix"}, &a));
  if (!a[0].is_string()) return absl::InvalidArgumentError("must be str, not " + TypeName(a[0]));
  const std::string& s = Self(self);
  const std::string& x = a[0].string_value();
  if (x.size() <= s.size()) {
    if (!suffix && s.compare(0, x.size(), x) == 0) return Value::String(s.substr(x.size()));
    if (suffix && s.compare(s.size() - x.size(), x.size(), x) == 0)
      return Value::String(s.substr(0, s.size() - x.size()));
  }
  return self;
}

#define SHARDLM_STR_METHOD(name, expr)                                                          \
  {                                                                                             \
    name, [](const Value& self, const CallArgs& args) -> absl::StatusOr<Value> { return expr; } \
  }

const std::vector<std::pair<std::string_view, Method>>& StrMethods() {
  static const auto* methods = new std::vector<std::pair<std::string_view, Method>>{
      SHARDLM_STR_METHOD("upper", CaseMethod(self, args, py::Upper, "upper")),
      SHARDLM_STR_METHOD("lower", CaseMethod(self, args, py::Lower, "lower")),
      SHARDLM_STR_METHOD("casefold", CaseMethod(self, args, py::Lower, "casefold")),
      SHARDLM_STR_METHOD("title", CaseMethod(self, args, py::Title, "title")),
      SHARDLM_STR_METHOD("capitalize", CaseMethod(self, args, py::Capitalize, "capitalize")),
      SHARDLM_STR_METHOD("swapcase", CaseMethod(self, args, py::SwapCase, "swapcase")),
      SHARDLM_STR_METHOD("strip", StripMethod(self, args, true, true)),
      SHARDLM_STR_METHOD("lstrip", StripMethod(self, args, true, false)),
      SHARDLM_STR_METHOD("rstrip", StripMethod(self, args, false, true)),
      SHARDLM_STR_METHOD("split", SplitMethod(self, args, false)),
      SHARDLM_STR_METHOD("rsplit", SplitMethod(self, args, true)),
      SHARDLM_STR_METHOD("splitlines", StrSplitLines(self, args)),
      SHARDLM_STR_METHOD("startswith", AffixMethod(self, args, false)),
      SHARDLM_STR_METHOD("endswith", AffixMethod(self, args, true)),
      SHARDLM_STR_METHOD("find", FindMethod(self, args, false, false)),
      SHARDLM_STR_METHOD("rfind", FindMethod(self, args, true, false)),
      SHARDLM_STR_METHOD("index", FindMethod(self, args, false, true)),
      SHARDLM_STR_METHOD("rindex", FindMethod(self, args, true, true)),
      SHARDLM_STR_METHOD("count", StrCount(self, args)),
      SHARDLM_STR_METHOD("replace", StrReplace(self, args)),
      SHARDLM_STR_METHOD("join", StrJoin(self, args)),
      SHARDLM_STR_METHOD("format", StrFormatMethod(self, args)),
      SHARDLM_STR_METHOD("isdigit", CharTest(self, args, py::IsDigit)),
      SHARDLM_STR_METHOD("isdecimal", CharTest(self, args, py::IsDigit)),
      SHARDLM_STR_METHOD("isnumeric", CharTest(self, args, py::IsDigit)),
      SHARDLM_STR_METHOD("isalpha", CharTest(self, args, py::IsAlpha)),
      SHARDLM_STR_METHOD("isalnum",
                         CharTest(self, args, [](char32_t c) { return py::IsAlpha(c) || py::IsDigit(c); })),
      SHARDLM_STR_METHOD("isspace", CharTest(self, args, py::IsSpace)),
      SHARDLM_STR_METHOD("isupper", CaseTest(self, args, true)),
      SHARDLM_STR_METHOD("islower", CaseTest(self, args, false)),
      SHARDLM_STR_METHOD("center", JustifyMethod(self, args, '^')),
      SHARDLM_STR_METHOD("ljust", JustifyMethod(self, args, '<')),
      SHARDLM_STR_METHOD("rjust", JustifyMethod(self, args, '>')),
      SHARDLM_STR_METHOD("zfill", StrZfill(self, args)),
      SHARDLM_STR_METHOD("partition", PartitionMethod(self, args, false)),
      SHARDLM_STR_METHOD("rpartition", PartitionMethod(self, args, true)),
      SHARDLM_STR_METHOD("removeprefix", RemoveAffix(self, args, false)),
      SHARDLM_STR_METHOD("removesuffix", RemoveAffix(self, args, true)),
  };
  return *methods;
}

// ---- dict, list and tuple methods ----

absl::StatusOr<Value> DictView(const Value& self, const CallArgs& args, int which) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs(which == 0 ? "items" : (which == 1 ? "keys" : "values"), args, {}, &a));
  std::vector<Value> out;
  for (const auto& [k, v] : self.dict().entries()) {
    out.push_back(which == 0 ? Value::Tuple({k, v}) : (which == 1 ? k : v));
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> DictGet(const Value& self, const CallArgs& args) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("get", args, {"key", "default"}, &a));
  if (args.positional.empty()) return absl::InvalidArgumentError("get() takes at least 1 argument (0 given)");
  if (const Value* v = self.dict().Find(a[0])) return *v;
  return a[1].is_undefined() ? Value::None() : a[1];
}

absl::StatusOr<Value> SeqIndex(const Value& self, const CallArgs& args) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("index", args, {"value"}, &a));
  for (size_t i = 0; i < self.items().size(); ++i) {
    if (Equals(self.items()[i], a[0])) return Value::Int(static_cast<int64_t>(i));
  }
  return ValueError(Repr(a[0]) + " is not in " + TypeName(self));
}

absl::StatusOr<Value> SeqCount(const Value& self, const CallArgs& args) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("count", args, {"value"}, &a));
  return Value::Int(std::count_if(self.items().begin(), self.items().end(),
                                  [&](const Value& v) { return Equals(v, a[0]); }));
}

absl::StatusOr<Value> Copy(const Value& self, const CallArgs& args) {
  std::vector<Value> a;
  SHARDLM_RETURN_IF_ERROR(BindArgs("copy", args, {}, &a));
  return self;
}

bool IsOneOf(const std::string& name, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

Value Bind(const Value& self, const std::string& name, Method method) {
  return Value::Callable(TypeName(self) + "." + name,
                         [self, method](const CallArgs& args) { return method(self, args); });
}

}  // namespace

std::optional<Value> BoundMethod(const Value& self, const std::string& name) {
  if (self.is_string()) {
    for (const auto& [method_name, method] : StrMethods()) {
      if (method_name == name) return Bind(self, name, method);
    }
    return std::nullopt;
  }
  Method method = nullptr;
  if (self.is_dict()) {
    if (name == "items") {
      method = [](const Value& s, const CallArgs& a) { return DictView(s, a, 0); };
    } else if (name == "keys") {
      method = [](const Value& s, const CallArgs& a) { return DictView(s, a, 1); };
    } else if (name == "values") {
      method = [](const Value& s, const CallArgs& a) { return DictView(s, a, 2); };
    } else if (name == "get") {
      method = DictGet;
    } else if (name == "copy") {
      method = Copy;
    } else if (IsOneOf(name, {"pop", "popitem", "setdefault", "update", "clear"})) {
      return Value::Undefined("access to attribute '" + name + "' of 'dict' object is unsafe.");
    }
  } else if (self.is_sequence()) {
    if (name == "index") {
      method = SeqIndex;
    } else if (name == "count") {
      method = SeqCount;
    } else if (name == "copy" && self.kind() == Value::Kind::kList) {
      method = Copy;
    } else if (self.kind() == Value::Kind::kList &&
               IsOneOf(name, {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"})) {
      return Value::Undefined("access to attribute '" + name + "' of 'list' object is unsafe.");
    }
  }
  if (method == nullptr) return std::nullopt;
  return Bind(self, name, method);
}

}  // namespace shardlm::jinja
