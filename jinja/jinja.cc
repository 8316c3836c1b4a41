// Template parsing and the renderer: a tree walk over the syntax tree with
// Jinja2's scoping (a for-loop iteration, a macro call and a `with` block each
// get a fresh scope; `if` does not; `set` writes the innermost scope).
#include "jinja/jinja.h"

#include <algorithm>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "jinja/jinja_ast.h"
#include "jinja/jinja_builtins.h"
#include "jinja/jinja_lexer.h"
#include "jinja/jinja_ops.h"
#include "jinja/jinja_parser.h"

namespace shardlm::jinja {

struct Template::Parsed {
  Body body;
  Options options;
};

namespace {

enum class Flow { kNormal, kBreak, kContinue };

// Whether `json` nests more than `limit` levels (recursing at most that far).
bool JsonDepthExceeds(const nlohmann::ordered_json& json, int limit) {
  if (!json.is_structured()) return false;
  if (limit <= 0) return true;
  for (const auto& item : json) {
    if (JsonDepthExceeds(item, limit - 1)) return true;
  }
  return false;
}

struct Scope {
  Scope* parent = nullptr;
  std::unordered_map<std::string, Value> vars;
};

class Renderer {
 public:
  Renderer(const Options& options, const Functions& functions) : options_(options), functions_(functions) {}

  absl::StatusOr<std::string> Run(const Body& body, const nlohmann::ordered_json& context) {
    if (!context.is_null() && !context.is_object()) {
      return absl::InvalidArgumentError("template context must be a JSON object");
    }
    if (context.is_object()) {
      if (JsonDepthExceeds(context, options_.limits.max_nesting + 1)) {
        return absl::InvalidArgumentError(
            absl::StrCat("template context nested more than ", options_.limits.max_nesting, " levels deep"));
      }
      for (const auto& [key, value] : context.items()) root_.vars[key] = Value::FromJson(value);
    }
    std::string out;
    Flow flow = Flow::kNormal;
    SHARDLM_RETURN_IF_ERROR(Exec(body, &out, &flow));
    return out;
  }

 private:
  // Adds the template line to an error raised by an operation, once.
  absl::Status Fail(int line, const absl::Status& status) {
    if (raised_ || annotated_) return status;
    annotated_ = true;
    return absl::InvalidArgumentError(absl::StrCat("template line ", line, ": ", status.message()));
  }
  absl::Status Fail(int line, const std::string& message) {
    return Fail(line, absl::InvalidArgumentError(message));
  }

  // ---- statements ----

  absl::Status Exec(const Body& body, std::string* out, Flow* flow) {
    for (const StmtPtr& stmt : body) {
      SHARDLM_RETURN_IF_ERROR(ExecStmt(*stmt, out, flow));
      if (*flow != Flow::kNormal) return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  absl::Status ExecStmt(const Stmt& s, std::string* out, Flow* flow) {
    switch (s.kind) {
      case StmtKind::kOutput:
        for (const OutputPiece& piece : s.pieces) {
          if (piece.expr) {
            SHARDLM_ASSIGN_OR_RETURN(Value v, Eval(*piece.expr));
            *out += ToStr(v);
          } else {
            *out += piece.text;
          }
          SHARDLM_RETURN_IF_ERROR(CheckOutput(s.line, *out));
        }
        return absl::OkStatus();
      case StmtKind::kIf:
        for (size_t i = 0; i < s.exprs.size(); ++i) {
          SHARDLM_ASSIGN_OR_RETURN(Value cond, Eval(*s.exprs[i]));
          if (Truthy(cond)) return Exec(s.bodies[i], out, flow);
        }
        return Exec(s.else_body, out, flow);
      case StmtKind::kFor:
        return ExecFor(s, out);
      case StmtKind::kSet: {
        SHARDLM_ASSIGN_OR_RETURN(Value v, Eval(*s.exprs[0]));
        return Assign(s.target, v, s.line);
      }
      case StmtKind::kSetBlock: {
        std::string captured;
        SHARDLM_RETURN_IF_ERROR(Exec(s.bodies[0], &captured, flow));
        Value v = Value::String(std::move(captured));
        if (s.filter) {
          SHARDLM_ASSIGN_OR_RETURN(v, EvalFilter(*s.filter, v));
        }
        return Assign(s.target, v, s.line);
      }
      case StmtKind::kMacro: {
        const Stmt* macro = &s;
        scope_->vars[s.name] = Value::Callable(
            s.name, [this, macro](const CallArgs& args) { return CallMacro(*macro, args, &root_); });
        return absl::OkStatus();
      }
      case StmtKind::kCallBlock:
        return ExecCallBlock(s, out);
      case StmtKind::kFilterBlock: {
        std::string captured;
        SHARDLM_RETURN_IF_ERROR(Exec(s.bodies[0], &captured, flow));
        SHARDLM_ASSIGN_OR_RETURN(Value v, EvalFilter(*s.filter, Value::String(std::move(captured))));
        *out += ToStr(v);
        return CheckOutput(s.line, *out);
      }
      case StmtKind::kWith: {
        Scope inner{scope_, {}};
        for (size_t i = 0; i < s.params.size(); ++i) {
          SHARDLM_ASSIGN_OR_RETURN(inner.vars[s.params[i]], Eval(*s.exprs[i]));
        }
        return InScope(&inner, [&] { return Exec(s.bodies[0], out, flow); });
      }
      case StmtKind::kBreak:
        *flow = Flow::kBreak;
        return absl::OkStatus();
      case StmtKind::kContinue:
        *flow = Flow::kContinue;
        return absl::OkStatus();
      case StmtKind::kScope: {
        // transformers runs {% generation %} bodies as a call block: a macro
        // that sees the enclosing variables.
        Scope inner{scope_, {}};
        return InScope(&inner, [&] { return Exec(s.bodies[0], out, flow); });
      }
    }
    return absl::OkStatus();
  }

  template <typename Fn>
  absl::Status InScope(Scope* scope, Fn&& fn) {
    Scope* saved = scope_;
    scope_ = scope;
    absl::Status status = fn();
    scope_ = saved;
    return status;
  }

  absl::Status CheckOutput(int line, const std::string& out) {
    if (static_cast<int64_t>(out.size()) > options_.limits.max_output_bytes) {
      return Fail(line, absl::StrCat("rendered text exceeds the limit of ", options_.limits.max_output_bytes,
                                     " bytes"));
    }
    return absl::OkStatus();
  }

  absl::Status Bind(const Target& target, const Value& v, int line, Scope* scope) {
    if (!target.unpack) {
      scope->vars[target.names[0]] = v;
      return absl::OkStatus();
    }
    absl::StatusOr<std::vector<Value>> items = Iterate(v);
    if (!items.ok()) return Fail(line, "cannot unpack non-iterable " + TypeName(v) + " object");
    if (items->size() != target.names.size()) {
      return Fail(line, items->size() > target.names.size()
                            ? absl::StrCat("too many values to unpack (expected ", target.names.size(), ")")
                            : absl::StrCat("not enough values to unpack (expected ", target.names.size(),
                                           ", got ", items->size(), ")"));
    }
    for (size_t i = 0; i < items->size(); ++i) scope->vars[target.names[i]] = (*items)[i];
    return absl::OkStatus();
  }

  absl::Status Assign(const Target& target, const Value& v, int line) {
    if (target.attribute.empty()) return Bind(target, v, line, scope_);
    const Value ns = Lookup(target.names[0]);
    if (!ns.is_object() || ns.object().type_name != "Namespace") {
      return Fail(line, "cannot assign attribute on non-namespace object");
    }
    ns.object().attributes.Set(Value::String(target.attribute), v);
    return absl::OkStatus();
  }

  absl::Status ExecFor(const Stmt& s, std::string* out) {
    SHARDLM_ASSIGN_OR_RETURN(Value iterable, Eval(*s.exprs[0]));
    absl::StatusOr<std::vector<Value>> all = Iterate(iterable);
    if (!all.ok()) return Fail(s.line, all.status());
    std::vector<Value> items;
    if (s.exprs.size() > 1) {
      for (Value& item : *all) {
        Scope filter_scope{scope_, {}};
        SHARDLM_RETURN_IF_ERROR(Bind(s.target, item, s.line, &filter_scope));
        Value keep;
        SHARDLM_RETURN_IF_ERROR(InScope(&filter_scope, [&]() -> absl::Status {
          SHARDLM_ASSIGN_OR_RETURN(keep, Eval(*s.exprs[1]));
          return absl::OkStatus();
        }));
        if (Truthy(keep)) items.push_back(std::move(item));
      }
    } else {
      items = std::move(*all);
    }
    const auto n = static_cast<int64_t>(items.size());
    auto last_changed = std::make_shared<Value>();
    for (int64_t i = 0; i < n; ++i) {
      if (++iterations_ > options_.limits.max_loop_iterations) {
        return Fail(s.line,
                    absl::StrCat("more than ", options_.limits.max_loop_iterations,
                                 " loop iterations: the template does not terminate in reasonable time"));
      }
      Scope iteration{scope_, {}};
      SHARDLM_RETURN_IF_ERROR(Bind(s.target, items[i], s.line, &iteration));
      iteration.vars["loop"] = LoopObject(items, i, last_changed);
      Flow flow = Flow::kNormal;
      SHARDLM_RETURN_IF_ERROR(InScope(&iteration, [&] { return Exec(s.bodies[0], out, &flow); }));
      if (flow == Flow::kBreak) break;
    }
    if (n == 0 && !s.else_body.empty()) {
      Scope inner{scope_, {}};
      Flow flow = Flow::kNormal;
      return InScope(&inner, [&] { return Exec(s.else_body, out, &flow); });
    }
    return absl::OkStatus();
  }

  Value LoopObject(const std::vector<Value>& items, int64_t i, const std::shared_ptr<Value>& last_changed) {
    const auto n = static_cast<int64_t>(items.size());
    auto loop = std::make_shared<Object>();
    loop->type_name = "LoopContext";
    Dict& a = loop->attributes;
    a.Set(Value::String("index"), Value::Int(i + 1));
    a.Set(Value::String("index0"), Value::Int(i));
    a.Set(Value::String("revindex"), Value::Int(n - i));
    a.Set(Value::String("revindex0"), Value::Int(n - i - 1));
    a.Set(Value::String("first"), Value::Bool(i == 0));
    a.Set(Value::String("last"), Value::Bool(i == n - 1));
    a.Set(Value::String("length"), Value::Int(n));
    // depth counts recursive-loop levels, which are not supported: always 1.
    a.Set(Value::String("depth"), Value::Int(1));
    a.Set(Value::String("depth0"), Value::Int(0));
    a.Set(Value::String("previtem"), i > 0 ? items[i - 1] : Value::Undefined("there is no previous item"));
    a.Set(Value::String("nextitem"), i + 1 < n ? items[i + 1] : Value::Undefined("there is no next item"));
    a.Set(Value::String("cycle"),
          Value::Callable("cycle", [i](const CallArgs& args) -> absl::StatusOr<Value> {
            if (args.positional.empty()) return absl::InvalidArgumentError("no items for cycling given");
            return args.positional[i % args.positional.size()];
          }));
    // loop.changed(*values): true when values differ from the previous call in this loop.
    a.Set(Value::String("changed"), Value::Callable("changed", [last_changed](const CallArgs& args) {
            Value current = Value::Tuple(args.positional);
            const bool changed = last_changed->is_undefined() || !Equals(*last_changed, current);
            *last_changed = std::move(current);
            return absl::StatusOr<Value>(Value::Bool(changed));
          }));
    return Value::MakeObject(std::move(loop));
  }

  absl::Status ExecCallBlock(const Stmt& s, std::string* out) {
    // `caller` renders the body in the scope of the call site, which lives only
    // as long as this block: a caller kept and called later fails instead.
    auto alive = std::make_shared<bool>(true);
    Scope* site = scope_;
    const Stmt* block = &s;
    Value caller =
        Value::Callable("caller", [this, block, site, alive](const CallArgs& args) -> absl::StatusOr<Value> {
          if (!*alive) return absl::InvalidArgumentError("caller() called after its call block ended");
          return CallMacro(*block, args, site);
        });
    const Expr& call = *s.exprs[0];
    SHARDLM_ASSIGN_OR_RETURN(Value callee, Eval(*call.operands[0]));
    SHARDLM_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(call));
    args.keyword.emplace_back("caller", std::move(caller));
    absl::StatusOr<Value> result = CallValue(callee, args);
    *alive = false;
    if (!result.ok()) return Fail(s.line, result.status());
    *out += ToStr(*result);
    return CheckOutput(s.line, *out);
  }

  absl::StatusOr<Value> CallValue(const Value& callee, const CallArgs& args) {
    if (callee.is_undefined()) return UndefinedError(callee);
    if (!callee.is_callable())
      return absl::InvalidArgumentError("'" + TypeName(callee) + "' object is not callable");
    return callee.function()(args);
  }

  // Runs a macro (or a call block's body) in a new scope under `parent`.
  absl::StatusOr<Value> CallMacro(const Stmt& macro, const CallArgs& args, Scope* parent) {
    if (call_depth_ >= options_.limits.max_call_depth) {
      return Fail(macro.line, absl::StrCat("macro '", macro.name, "' nested more than ",
                                           options_.limits.max_call_depth, " calls deep"));
    }
    Scope frame{parent, {}};
    const size_t n = macro.params.size();
    std::vector<bool> given(n, false);
    std::vector<Value> varargs;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < n) {
        frame.vars[macro.params[i]] = args.positional[i];
        given[i] = true;
      } else {
        varargs.push_back(args.positional[i]);
      }
    }
    Dict kwargs;
    for (const auto& [key, value] : args.keyword) {
      const auto it = std::find(macro.params.begin(), macro.params.end(), key);
      if (it == macro.params.end()) {
        if (key == "caller") {
          frame.vars["caller"] = value;
        } else {
          kwargs.Set(Value::String(key), value);
        }
        continue;
      }
      const auto index = static_cast<size_t>(it - macro.params.begin());
      if (given[index]) {
        return Fail(macro.line, "macro '" + macro.name + "' got multiple values for argument '" + key + "'");
      }
      frame.vars[key] = value;
      given[index] = true;
    }
    frame.vars["varargs"] = Value::Tuple(std::move(varargs));
    frame.vars["kwargs"] = Value::MakeDict(std::move(kwargs));
    ++call_depth_;
    std::string out;
    const absl::Status status = InScope(&frame, [&]() -> absl::Status {
      const size_t first_default = n - macro.defaults.size();
      for (size_t i = 0; i < n; ++i) {
        if (given[i]) continue;
        if (i >= first_default) {
          SHARDLM_ASSIGN_OR_RETURN(frame.vars[macro.params[i]], Eval(*macro.defaults[i - first_default]));
        } else {
          frame.vars[macro.params[i]] =
              Value::Undefined("parameter '" + macro.params[i] + "' was not provided");
        }
      }
      Flow flow = Flow::kNormal;
      return Exec(macro.bodies[0], &out, &flow);
    });
    --call_depth_;
    SHARDLM_RETURN_IF_ERROR(status);
    return Value::String(std::move(out));
  }

  // ---- expressions ----

  Value Lookup(const std::string& name) {
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

  absl::StatusOr<CallArgs> EvalArgs(const Expr& e) {
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
      if (!extra.is_dict())
        return Fail(e.line, "argument after ** must be a mapping, not " + TypeName(extra));
      for (const auto& [k, v] : extra.dict().entries()) {
        if (!k.is_string()) return Fail(e.line, "keywords must be strings");
        args.keyword.emplace_back(k.string_value(), v);
      }
    }
    return args;
  }

  // A filter expression; in filter and set blocks the innermost operand is
  // null and `block_input` is filtered instead.
  absl::StatusOr<Value> EvalFilter(const Expr& f, const Value& block_input) {
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

  absl::StatusOr<bool> EvalCompare(CompareOp op, const Value& a, const Value& b) {
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

  absl::StatusOr<Value> Eval(const Expr& e) {
    absl::StatusOr<Value> r = EvalInner(e);
    if (!r.ok()) return Fail(e.line, r.status());
    // Every value a template builds passes here, so none nests deeper than
    // the limit (plus the one level a single operation may add).
    if (r->depth() > options_.limits.max_nesting) {
      return Fail(e.line,
                  absl::StrCat("value nested more than ", options_.limits.max_nesting, " levels deep"));
    }
    return r;
  }

  // [a, b] or (a, b).
  absl::StatusOr<Value> EvalSequence(const Expr& e) {
    std::vector<Value> items;
    for (const ExprPtr& op : e.operands) {
      SHARDLM_ASSIGN_OR_RETURN(Value v, Eval(*op));
      items.push_back(std::move(v));
    }
    return e.kind == ExprKind::kList ? Value::List(std::move(items)) : Value::Tuple(std::move(items));
  }

  // {k: v, ...}: keys must be hashable, as in Python.
  absl::StatusOr<Value> EvalDict(const Expr& e) {
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
  absl::StatusOr<Value> EvalGetItem(const Expr& e) {
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
  absl::StatusOr<Value> EvalChain(const Expr& e) {
    SHARDLM_ASSIGN_OR_RETURN(Value left, Eval(*e.operands[0]));
    for (size_t i = 0; i < e.compare_ops.size(); ++i) {
      SHARDLM_ASSIGN_OR_RETURN(Value right, Eval(*e.operands[i + 1]));
      SHARDLM_ASSIGN_OR_RETURN(bool ok, EvalCompare(e.compare_ops[i], left, right));
      if (!ok) return Value::Bool(false);
      left = std::move(right);
    }
    return Value::Bool(true);
  }

  absl::StatusOr<Value> EvalInner(const Expr& e) {
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

  const Options& options_;
  const Functions& functions_;
  Scope root_;
  Scope* scope_ = &root_;
  int64_t iterations_ = 0;
  int call_depth_ = 0;
  bool raised_ = false;
  bool annotated_ = false;
};

}  // namespace

Options Options::HuggingFace() {
  Options options;
  options.trim_blocks = true;
  options.lstrip_blocks = true;
  return options;
}

absl::StatusOr<Template> Template::Parse(std::string_view source, const Options& options) {
  LexerOptions lexer_options{options.trim_blocks, options.lstrip_blocks, options.keep_trailing_newline};
  SHARDLM_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source, lexer_options));
  auto parsed = std::make_shared<Parsed>();
  SHARDLM_ASSIGN_OR_RETURN(parsed->body, ParseTokens(std::move(tokens)));
  parsed->options = options;
  return Template(std::move(parsed));
}

absl::StatusOr<std::string> Template::Render(const nlohmann::ordered_json& context,
                                             const Functions& functions) const {
  Renderer renderer(parsed_->options, functions);
  return renderer.Run(parsed_->body, context);
}

}  // namespace shardlm::jinja
