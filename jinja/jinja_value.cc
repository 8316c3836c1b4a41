#include "jinja/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "jinja/py_string.h"

namespace shardlm::jinja {
namespace {

struct CallableData {
  std::string name;
  NativeFunction fn;
};

constexpr int kMaxRecordedDepth = 60000;

uint16_t DepthOver(const std::vector<Value>& items) {
  int depth = 0;
  for (const Value& v : items) depth = std::max(depth, v.depth());
  return static_cast<uint16_t>(std::min(depth + 1, kMaxRecordedDepth));
}

uint16_t DepthOver(const Dict& dict) {
  int depth = 0;
  for (const auto& [k, v] : dict.entries()) depth = std::max({depth, k.depth(), v.depth()});
  return static_cast<uint16_t>(std::min(depth + 1, kMaxRecordedDepth));
}

// repr() recursion guard: the attribute dicts of the objects being printed
// (a namespace can hold itself; Python prints the repeat as {...}).
struct ReprState {
  std::vector<const Dict*> active;
  int depth = 0;
};

std::string ReprImpl(const Value& v, ReprState* state);

const std::string& EmptyString() {
  static const std::string* empty = new std::string();
  return *empty;
}

const std::vector<Value>& EmptyItems() {
  static const std::vector<Value>* empty = new std::vector<Value>();
  return *empty;
}

std::string JoinRepr(const std::vector<Value>& items, ReprState* state) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    out += ReprImpl(items[i], state);
  }
  return out;
}

std::string DictRepr(const Dict& dict, ReprState* state) {
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : dict.entries()) {
    if (!first) out += ", ";
    first = false;
    out += ReprImpl(k, state) + ": " + ReprImpl(v, state);
  }
  return out + "}";
}

}  // namespace

Value Value::Undefined(std::string hint) {
  Value v;
  v.ptr_ = std::make_shared<std::string>(std::move(hint));
  return v;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}

Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}

Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}

Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.ptr_ = std::make_shared<std::string>(std::move(s));
  return v;
}

Value Value::List(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::kList;
  v.depth_ = DepthOver(items);
  v.ptr_ = std::make_shared<std::vector<Value>>(std::move(items));
  return v;
}

Value Value::Tuple(std::vector<Value> items) {
  Value v = List(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}

Value Value::MakeDict(Dict dict) {
  Value v;
  v.kind_ = Kind::kDict;
  v.depth_ = DepthOver(dict);
  v.ptr_ = std::make_shared<Dict>(std::move(dict));
  return v;
}

Value Value::MakeObject(std::shared_ptr<Object> object) {
  Value v;
  v.kind_ = Kind::kObject;
  v.depth_ = DepthOver(object->attributes);
  v.ptr_ = std::move(object);
  return v;
}

Value Value::Callable(std::string name, NativeFunction fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.ptr_ = std::make_shared<CallableData>(CallableData{std::move(name), std::move(fn)});
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Int(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = json.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Int(static_cast<int64_t>(u));
      return Float(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Float(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return String(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(FromJson(item));
      return List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict dict;
      for (const auto& [k, item] : json.items()) dict.Set(String(k), FromJson(item));
      return MakeDict(std::move(dict));
    }
    default:
      return None();
  }
}

double Value::number_value() const {
  switch (kind_) {
    case Kind::kBool:
      return b_ ? 1 : 0;
    case Kind::kInt:
      return static_cast<double>(i_);
    case Kind::kFloat:
      return f_;
    default:
      return 0;
  }
}

const std::string& Value::string_value() const {
  return kind_ == Kind::kString ? *static_cast<const std::string*>(ptr_.get()) : EmptyString();
}

const std::vector<Value>& Value::items() const {
  return is_sequence() ? *static_cast<const std::vector<Value>*>(ptr_.get()) : EmptyItems();
}

const Dict& Value::dict() const {
  static const Dict* empty = new Dict();
  return kind_ == Kind::kDict ? *static_cast<const Dict*>(ptr_.get()) : *empty;
}

Object& Value::object() const { return *static_cast<Object*>(ptr_.get()); }

const std::string& Value::callable_name() const { return static_cast<const CallableData*>(ptr_.get())->name; }

const NativeFunction& Value::function() const { return static_cast<const CallableData*>(ptr_.get())->fn; }

const std::string& Value::undefined_hint() const {
  return (kind_ == Kind::kUndefined && ptr_) ? *static_cast<const std::string*>(ptr_.get()) : EmptyString();
}

const Value* Dict::Find(const std::string& key) const {
  auto it = string_keys_.find(key);
  return it == string_keys_.end() ? nullptr : &entries_[it->second].second;
}

const Value* Dict::Find(const Value& key) const {
  if (key.is_string()) return Find(key.string_value());
  for (const auto& [k, v] : entries_) {
    if (!k.is_string() && Equals(k, key)) return &v;
  }
  return nullptr;
}

void Dict::Set(Value key, Value value) {
  if (key.is_string()) {
    auto [it, inserted] = string_keys_.emplace(key.string_value(), entries_.size());
    if (!inserted) {
      entries_[it->second].second = std::move(value);
      return;
    }
  } else {
    for (auto& [k, v] : entries_) {
      if (!k.is_string() && Equals(k, key)) {
        v = std::move(value);
        return;
      }
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
}

bool Truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.bool_value();
    case Value::Kind::kInt:
      return v.int_value() != 0;
    case Value::Kind::kFloat:
      return v.number_value() != 0;
    case Value::Kind::kString:
      return !v.string_value().empty();
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return !v.items().empty();
    case Value::Kind::kDict:
      return v.dict().size() > 0;
    default:
      return true;
  }
}

std::string ToStr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kString:
      return v.string_value();
    default:
      return Repr(v);
  }
}

std::string Repr(const Value& v) {
  ReprState state;
  return ReprImpl(v, &state);
}

namespace {

std::string ReprImpl(const Value& v, ReprState* state) {
  // Values are depth-limited, but chains of namespaces are not.
  if (state->depth > 4096) return "...";
  ++state->depth;
  struct Leave {
    ReprState* s;
    ~Leave() { --s->depth; }
  } leave{state};
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.bool_value() ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.int_value());
    case Value::Kind::kFloat:
      return py::FloatRepr(v.number_value());
    case Value::Kind::kString:
      return py::Repr(v.string_value());
    case Value::Kind::kList:
      return "[" + JoinRepr(v.items(), state) + "]";
    case Value::Kind::kTuple:
      return "(" + JoinRepr(v.items(), state) + (v.items().size() == 1 ? ",)" : ")");
    case Value::Kind::kDict:
      return DictRepr(v.dict(), state);
    case Value::Kind::kObject: {
      const Object& o = v.object();
      if (o.type_name == "LoopContext") {
        const Value* index = o.attributes.Find(std::string("index"));
        const Value* length = o.attributes.Find(std::string("length"));
        return absl::StrCat("<LoopContext ", index ? ToStr(*index) : "?", "/", length ? ToStr(*length) : "?",
                            ">");
      }
      const Dict* attrs = &o.attributes;
      if (std::find(state->active.begin(), state->active.end(), attrs) != state->active.end()) {
        return "<" + o.type_name + " {...}>";
      }
      state->active.push_back(attrs);
      std::string out = "<" + o.type_name + " " + DictRepr(o.attributes, state) + ">";
      state->active.pop_back();
      return out;
    }
    case Value::Kind::kCallable:
      return "<function " + v.callable_name() + ">";
  }
  return "";
}

}  // namespace

std::string TypeName(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kTuple:
      return "tuple";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kObject:
      return v.object().type_name;
    case Value::Kind::kCallable:
      return "function";
  }
  return "object";
}

std::string ObjectTypeRepr(const Value& v) {
  if (v.is_none()) return "None";
  return TypeName(v) + " object";
}

bool Equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.int_value() == b.int_value();
    return a.number_value() == b.number_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.string_value() == b.string_value();
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!Equals(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [k, v] : a.dict().entries()) {
        const Value* other = b.dict().Find(k);
        if (other == nullptr || !Equals(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kObject:
      return &a.object() == &b.object();
    case Value::Kind::kCallable:
      return &a.function() == &b.function();
    default:
      return false;
  }
}

absl::StatusOr<int> Compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) {
      return a.int_value() < b.int_value() ? -1 : (a.int_value() > b.int_value() ? 1 : 0);
    }
    const double x = a.number_value(), y = b.number_value();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.string_value().compare(b.string_value());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.kind() == b.kind() && a.is_sequence()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!Equals(x[i], y[i])) return Compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  if (a.is_undefined() || b.is_undefined()) {
    const Value& u = a.is_undefined() ? a : b;
    return absl::InvalidArgumentError(u.undefined_hint());
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'<' not supported between instances of '", TypeName(a), "' and '", TypeName(b), "'"));
}

}  // namespace shardlm::jinja
