// Jinja's filters (declared in jinja_builtins.h), one function each, in the
// alphabetical table at the end: those over sequences and mappings here, those
// over strings and numbers in jinja_text_filters.cc.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "jinja/jinja_builtins.h"
#include "jinja/jinja_filters_impl.h"
#include "jinja/jinja_methods.h"
#include "jinja/jinja_ops.h"
#include "jinja/py_string.h"

namespace shardlm::jinja {
namespace filters {

absl::Status FilterError(const std::string& message) { return absl::InvalidArgumentError(message); }

absl::Status CheckSize(const std::string& s, const Limits& limits) {
  if (static_cast<int64_t>(s.size()) > limits.max_output_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("result too large: over the template limit of ", limits.max_output_bytes, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace filters

namespace {

using namespace filters;  // NOLINT: the table names the filters of both files

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
