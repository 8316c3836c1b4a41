// The values a Jinja template computes with, modelled on the Python objects
// Jinja2 would hold: None, bool, int, float, str, list, tuple, dict (insertion
// ordered), Undefined, objects with attributes (namespace(), the `loop`
// variable) and callables.
//
// Strings, lists and dicts are immutable once built and shared by pointer, so a
// copy is cheap; objects (namespaces) are shared and mutable, as in Python.
// Printing follows Python: ToStr is str(), Repr is repr().
//
//   Value v = Value::FromJson(nlohmann::ordered_json::parse(R"({"a": [1, 2.0, null]})"));
//   ToStr(v)  -> "{'a': [1, 2.0, None]}"
//   ToJsonText(v, JsonOptions{}).value()  -> "{\"a\": [1, 2.0, null]}"
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace shardlm::jinja {

class Value;
class Dict;
struct Object;

// Arguments of a call: f(1, x, key=2).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using NativeFunction = std::function<absl::StatusOr<Value>(const CallArgs& args)>;

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kDict,
    kObject,
    kCallable,
  };

  // Undefined; `hint` is the error raised when it is used (e.g. "'x' is undefined").
  Value() = default;
  static Value Undefined(std::string hint);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  static Value List(std::vector<Value> items);
  static Value Tuple(std::vector<Value> items);
  static Value MakeDict(Dict dict);
  static Value MakeObject(std::shared_ptr<Object> object);
  static Value Callable(std::string name, NativeFunction fn);
  // JSON null/bool/number/string/array/object -> None/bool/int|float/str/list/dict.
  static Value FromJson(const nlohmann::ordered_json& json);

  Kind kind() const { return kind_; }
  // Levels of containers: 0 for a scalar, 1 for [1], 2 for [[1]], ...
  int depth() const { return depth_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  // bool, int or float (Python's numbers.Number).
  bool is_number() const { return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  // int or bool: usable as an index.
  bool is_integral() const { return kind_ == Kind::kBool || kind_ == Kind::kInt; }
  bool is_sequence() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_object() const { return kind_ == Kind::kObject; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool bool_value() const { return b_; }
  // int or bool as an integer.
  int64_t int_value() const { return kind_ == Kind::kBool ? static_cast<int64_t>(b_) : i_; }
  // Any number as a double.
  double number_value() const;
  const std::string& string_value() const;
  // The items of a list or tuple.
  const std::vector<Value>& items() const;
  const Dict& dict() const;
  Object& object() const;
  const std::string& callable_name() const;
  const NativeFunction& function() const;
  // Why this value is undefined.
  const std::string& undefined_hint() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  uint16_t depth_ = 0;
  int64_t i_ = 0;
  double f_ = 0;
  // string / undefined hint: std::string; list, tuple: std::vector<Value>;
  // dict: Dict; object: Object; callable: CallableData.
  std::shared_ptr<void> ptr_;
};

// An insertion-ordered dict, as Python's.
class Dict {
 public:
  const Value* Find(const Value& key) const;
  const Value* Find(const std::string& key) const;
  // Inserts or replaces (keeping the key's first position).
  void Set(Value key, Value value);
  const std::vector<std::pair<Value, Value>>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }

 private:
  std::vector<std::pair<Value, Value>> entries_;
  std::unordered_map<std::string, size_t> string_keys_;
};

// An object with attributes: a namespace() (assignable with `set ns.x = ...`)
// or the `loop` variable.
struct Object {
  std::string type_name;  // "Namespace", "LoopContext"
  Dict attributes;
};

// Caps that keep a runaway template from exhausting memory or time; going
// past one is an InvalidArgument error naming it.
struct Limits {
  int64_t max_output_bytes = int64_t{64} << 20;    // the rendered text, and any one string
  int64_t max_items = int64_t{1} << 20;            // items of any one list a template builds
  int64_t max_loop_iterations = int64_t{1} << 22;  // for-loop iterations in one render, all loops
  int max_call_depth = 64;                         // nested macro calls
  int max_nesting = 512;  // levels of lists/dicts, in the context or built by the template
};

// Python truthiness (Undefined is false).
bool Truthy(const Value& v);
// str(v); Undefined prints as "".
std::string ToStr(const Value& v);
// repr(v).
std::string Repr(const Value& v);
// type(v).__name__: "str", "int", "NoneType", "dict", ...
std::string TypeName(const Value& v);
// Jinja's object_type_repr, used in its messages: "dict object", "None".
std::string ObjectTypeRepr(const Value& v);
// Python ==.
bool Equals(const Value& a, const Value& b);
// Python ordering (<0, 0, >0); TypeError text for unorderable types.
absl::StatusOr<int> Compare(const Value& a, const Value& b);

// json.dumps options, as transformers' `tojson` filter passes them.
struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // None: one line
  std::optional<std::pair<std::string, std::string>> separators;
  bool sort_keys = false;
};
// json.dumps(v, ...). Errors for values JSON cannot hold (Undefined, callables).
absl::StatusOr<std::string> ToJsonText(const Value& v, const JsonOptions& options);
// Conversion for callers outside the engine: tuples become arrays, Undefined null.
absl::StatusOr<nlohmann::ordered_json> ToJson(const Value& v);

}  // namespace shardlm::jinja
