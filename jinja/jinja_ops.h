// Python operations on jinja::Value, as a Jinja2 ImmutableSandboxedEnvironment
// performs them: attribute and item lookup (with Jinja's fallback from one to
// the other and Undefined when both fail), slicing, iteration, `in`, len(),
// arithmetic, and the methods of str, dict and list that templates call
// (`message.content.startswith('<')`, `tool.items()`).
//
// Errors are InvalidArgument with Python's message ("can only concatenate str
// (not \"int\") to str"); the renderer adds the template line. Using an
// Undefined fails with its hint ("'x' is undefined"). Methods that would mutate
// a list or dict are refused, as in the sandbox.
//
//   SHARDLM_ASSIGN_OR_RETURN(Value role, GetAttr(message, "role"));
//   SHARDLM_ASSIGN_OR_RETURN(Value sum, Arithmetic(BinaryOp::kAdd, a, b, limits));
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "jinja/jinja_ast.h"
#include "jinja/jinja_value.h"

namespace shardlm::jinja {

// obj.name: a method of str/dict/list, a namespace attribute, or (for dicts)
// the item; Undefined when none exists.
absl::StatusOr<Value> GetAttr(const Value& obj, const std::string& name);
// obj[key]: the item, or the attribute for a string key, or Undefined.
absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);
// obj[start:stop:step] for str, list and tuple (bounds None or integers).
absl::StatusOr<Value> GetSlice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// The items `for x in v` visits: list/tuple items, dict keys, characters;
// nothing for Undefined.
absl::StatusOr<std::vector<Value>> Iterate(const Value& v);
// len(v); 0 for Undefined.
absl::StatusOr<int64_t> Length(const Value& v);
// `item in container`.
absl::StatusOr<bool> Contains(const Value& container, const Value& item);
absl::StatusOr<Value> Arithmetic(BinaryOp op, const Value& a, const Value& b, const Limits& limits);
absl::StatusOr<Value> Negate(const Value& v, bool minus);
// fmt % args (printf-style), as Python's str % operator.
absl::StatusOr<std::string> PercentFormat(const std::string& fmt, const Value& args);
// The error for using an Undefined.
absl::Status UndefinedError(const Value& v);

// Binds a call's arguments to parameter names, as Python binds
// `def f(a, b=..., c=...)`; parameters not passed stay Undefined. Errors for
// too many positional or unknown keyword arguments name `function`.
absl::Status BindArgs(std::string_view function, const CallArgs& args,
                      std::initializer_list<std::string_view> params, std::vector<Value>* out);
// An integer argument (int or bool), or `fallback` when Undefined or None.
absl::StatusOr<int64_t> IntArg(std::string_view function, const Value& v, int64_t fallback);
// A str argument, or nullopt when Undefined or None.
absl::StatusOr<std::optional<std::string>> StringArg(std::string_view function, const Value& v);

}  // namespace shardlm::jinja
