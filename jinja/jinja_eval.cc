// The renderer's expressions (jinja_renderer.h): names through the scopes,
// operators with Python's semantics (jinja_ops.h), filters and tests
// (jinja_builtins.h), calls, subscripts and slices, comparison chains.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "jinja/jinja_builtins.h"
#include "jinja/jinja_methods.h"
#include "jinja/jinja_ops.h"
#include "jinja/jinja_renderer.h"

namespace shardlm::jinja::render {

Value Renderer::Lookup(const std::string& name) {
  for (Scope* s = scope_; s != nullptr; s = s->parent) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  if (auto it = functions_.find(name); it != functions_.end()) {
    const Function* fn = &it->second;
    return Value::Callable(name, [fn](const CallArgs& args) -> absl::StatusOr<Value> {
      nlohmann::ordered_json positional = nlohmann::ordered_json::array();
      nlohmann::ordered_json keyword = nlohmann::ordered_json::object();
      for (const Value& v : args.positional) {
        SHARDLM_ASSIGN_OR_RETURN(nlohmann::ordered_json j, ToJson(v));
        positional.push_back(std::move(j));
      }
      for (const auto& [k, v] : args.keyword) {
        SHARDLM_ASSIGN_OR_RETURN(keyword[k], ToJson(v));
      }
      SHARDLM_ASSIGN_OR_RETURN(nlohmann::ordered_json result, (*fn)(positional, keyword));
      return Value::FromJson(result);
    });
  }
  if (name == "raise_exception") {
    return Value::Callable(name, [this](const CallArgs& args) -> absl::StatusOr<Value> {
      raised_ = true;
      return absl::InvalidArgumentError(args.positional.empty() ? "" : ToStr(args.positional[0]));
    });
  }
  return BuiltinGlobal(name);
}

absl::StatusOr<CallArgs> Renderer::EvalArgs(const Expr& e) {
  CallArgs args;
  for (const ExprPtr& arg : e.args) {
    SHARDLM_ASSIGN_OR_RETURN(Value v, Eval(*arg));
    args.positional.push_back(std::move(v));
  }
  if (e.star_args) {
    SHARDLM_ASSIGN_OR_RETURN(Value extra, Eval(*e.star_args));
    absl::StatusOr<std::vector<Value>> items = Iterate(extra);
    if (!items.ok()) return Fail(e.line, items.status());
    args.positional.insert(args.positional.end(), items->begin(), items->end());
  }
  for (const auto& [key, arg] : e.kwargs) {
    SHARDLM_ASSIGN_OR_RETURN(Value v, Eval(*arg));
    args.keyword.emplace_back(key, std::move(v));
  }
  if (e.star_kwargs) {
    SHARDLM_ASSIGN_OR_RETURN(Value extra, Eval(*e.star_kwargs));
    if (!extra.is_dict()) return Fail(e.line, "argument after ** must be a mapping, not " + TypeName(extra));
    for (const auto& [k, v] : extra.dict().entries()) {
      if (!k.is_string()) return Fail(e.line, "keywords must be strings");
      args.keyword.emplace_back(k.string_value(), v);
    }
  }
  return args;
}

// A filter expression; in filter and set blocks the innermost operand is
// null and `block_input` is filtered instead.
absl::StatusOr<Value> Renderer::EvalFilter(const Expr& f, const Value& block_input) {
  Value input = block_input;
  if (const Expr* operand = f.operands[0].get()) {
    if (operand->kind == ExprKind::kFilter) {
      SHARDLM_ASSIGN_OR_RETURN(input, EvalFilter(*operand, block_input));
    } else {
      SHARDLM_ASSIGN_OR_RETURN(input, Eval(*operand));
    }
  }
  SHARDLM_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(f));
  absl::StatusOr<Value> result = ApplyFilter(f.name, input, args, options_.limits);
  if (!result.ok()) return Fail(f.line, result.status());
  return result;
}

absl::StatusOr<bool> Renderer::EvalCompare(CompareOp op, const Value& a, const Value& b) {
  switch (op) {
    case CompareOp::kEq:
      return Equals(a, b);
    case CompareOp::kNe:
      return !Equals(a, b);
    case CompareOp::kIn:
      return Contains(b, a);
    case CompareOp::kNotIn: {
      SHARDLM_ASSIGN_OR_RETURN(bool in, Contains(b, a));
      return !in;
    }
    default: {
      SHARDLM_ASSIGN_OR_RETURN(int c, Compare(a, b));
      if (op == CompareOp::kLt) return c < 0;
      if (op == CompareOp::kLe) return c <= 0;
      if (op == CompareOp::kGt) return c > 0;
      return c >= 0;
    }
  }
}

absl::StatusOr<Value> Renderer::Eval(const Expr& e) {
  absl::StatusOr<Value> r = EvalInner(e);
  if (!r.ok()) return Fail(e.line, r.status());
  // Every value a template builds passes here, so none nests deeper than
  // the limit (plus the one level a single operation may add).
  if (r->depth() > options_.limits.max_nesting) {
    return Fail(e.line, absl::StrCat("value nested more than ", options_.limits.max_nesting, " levels deep"));
  }
  return r;
}

// [a, b] or (a, b).
absl::StatusOr<Value> Renderer::EvalSequence(const Expr& e) {
  std::vector<Value> items;
  for (const ExprPtr& op : e.operands) {
    SHARDLM_ASSIGN_OR_RETURN(Value v, Eval(*op));
    items.push_back(std::move(v));
  }
  return e.kind == ExprKind::kList ? Value::List(std::move(items)) : Value::Tuple(std::move(items));
}

// {k: v, ...}: keys must be hashable, as in Python.
absl::StatusOr<Value> Renderer::EvalDict(const Expr& e) {
  Dict dict;
  for (size_t i = 0; i + 1 < e.operands.size(); i += 2) {
    SHARDLM_ASSIGN_OR_RETURN(Value k, Eval(*e.operands[i]));
    SHARDLM_ASSIGN_OR_RETURN(Value v, Eval(*e.operands[i + 1]));
    if (k.is_sequence() && k.kind() == Value::Kind::kList) {
      return absl::InvalidArgumentError("unhashable type: 'list'");
    }
    dict.Set(std::move(k), std::move(v));
  }
  return Value::MakeDict(std::move(dict));
}

// obj[key] or obj[start:stop:step].
absl::StatusOr<Value> Renderer::EvalGetItem(const Expr& e) {
  SHARDLM_ASSIGN_OR_RETURN(Value obj, Eval(*e.operands[0]));
  const Expr& key = *e.operands[1];
  if (key.kind == ExprKind::kSlice) {
    Value bounds[3];
    for (int i = 0; i < 3; ++i) {
      if (key.operands[i]) {
        SHARDLM_ASSIGN_OR_RETURN(bounds[i], Eval(*key.operands[i]));
      }
    }
    return GetSlice(obj, bounds[0], bounds[1], bounds[2]);
  }
  SHARDLM_ASSIGN_OR_RETURN(Value k, Eval(key));
  return GetItem(obj, k);
}

// a < b <= c ...: each operand evaluated once, stopping at the first false.
absl::StatusOr<Value> Renderer::EvalChain(const Expr& e) {
  SHARDLM_ASSIGN_OR_RETURN(Value left, Eval(*e.operands[0]));
  for (size_t i = 0; i < e.compare_ops.size(); ++i) {
    SHARDLM_ASSIGN_OR_RETURN(Value right, Eval(*e.operands[i + 1]));
    SHARDLM_ASSIGN_OR_RETURN(bool ok, EvalCompare(e.compare_ops[i], left, right));
    if (!ok) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

absl::StatusOr<Value> Renderer::EvalInner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kConst:
      return e.value;
    case ExprKind::kName:
      return Lookup(e.name);
    case ExprKind::kList:
    case ExprKind::kTuple:
      return EvalSequence(e);
    case ExprKind::kDict:
      return EvalDict(e);
    case ExprKind::kGetAttr: {
      SHARDLM_ASSIGN_OR_RETURN(Value obj, Eval(*e.operands[0]));
      return GetAttr(obj, e.name);
    }
    case ExprKind::kGetItem:
      return EvalGetItem(e);
    case ExprKind::kSlice:
      return absl::InvalidArgumentError("a slice outside of []");
    case ExprKind::kCall: {
      SHARDLM_ASSIGN_OR_RETURN(Value callee, Eval(*e.operands[0]));
      SHARDLM_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e));
      return CallValue(callee, args);
    }
    case ExprKind::kFilter:
      return EvalFilter(e, Value());
    case ExprKind::kTest: {
      SHARDLM_ASSIGN_OR_RETURN(Value v, Eval(*e.operands[0]));
      SHARDLM_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e));
      SHARDLM_ASSIGN_OR_RETURN(bool pass, ApplyTest(e.name, v, args));
      return Value::Bool(pass);
    }
    case ExprKind::kNot: {
      SHARDLM_ASSIGN_OR_RETURN(Value v, Eval(*e.operands[0]));
      return Value::Bool(!Truthy(v));
    }
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      SHARDLM_ASSIGN_OR_RETURN(Value v, Eval(*e.operands[0]));
      return Negate(v, e.kind == ExprKind::kNeg);
    }
    case ExprKind::kBinary: {
      SHARDLM_ASSIGN_OR_RETURN(Value a, Eval(*e.operands[0]));
      SHARDLM_ASSIGN_OR_RETURN(Value b, Eval(*e.operands[1]));
      return Arithmetic(e.binary_op, a, b, options_.limits);
    }
    case ExprKind::kAnd:
    case ExprKind::kOr: {
      SHARDLM_ASSIGN_OR_RETURN(Value a, Eval(*e.operands[0]));
      if (Truthy(a) == (e.kind == ExprKind::kOr)) return a;
      return Eval(*e.operands[1]);
    }
    case ExprKind::kCompare:
      return EvalChain(e);
    case ExprKind::kCondition: {
      SHARDLM_ASSIGN_OR_RETURN(Value cond, Eval(*e.operands[0]));
      if (Truthy(cond)) return Eval(*e.operands[1]);
      if (e.operands[2]) return Eval(*e.operands[2]);
      return Value::Undefined(absl::StrCat("the inline if-expression on line ", e.line,
                                           " evaluated to false and no else section was defined."));
    }
  }
  return absl::InternalError("unknown expression kind");
}

}  // namespace shardlm::jinja::render
