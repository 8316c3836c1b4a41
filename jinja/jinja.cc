// Template parsing, and the renderer's statements: a tree walk over the syntax
// tree with Jinja2's scoping (a for-loop iteration, a macro call and a `with`
// block each get a fresh scope; `if` does not; `set` writes the innermost scope);
// expressions are jinja_eval.cc's.
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
#include "jinja/jinja_renderer.h"

namespace shardlm::jinja {

struct Template::Parsed {
  Body body;
  Options options;
};

namespace {

// Whether `json` nests more than `limit` levels (recursing at most that far).
bool JsonDepthExceeds(const nlohmann::ordered_json& json, int limit) {
  if (!json.is_structured()) return false;
  if (limit <= 0) return true;
  for (const auto& item : json) {
    if (JsonDepthExceeds(item, limit - 1)) return true;
  }
  return false;
}

}  // namespace

namespace render {

absl::StatusOr<std::string> Renderer::Run(const Body& body, const nlohmann::ordered_json& context) {
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

absl::Status Renderer::Exec(const Body& body, std::string* out, Flow* flow) {
  for (const StmtPtr& stmt : body) {
    SHARDLM_RETURN_IF_ERROR(ExecStmt(*stmt, out, flow));
    if (*flow != Flow::kNormal) return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status Renderer::ExecStmt(const Stmt& s, std::string* out, Flow* flow) {
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

absl::Status Renderer::CheckOutput(int line, const std::string& out) {
  if (static_cast<int64_t>(out.size()) > options_.limits.max_output_bytes) {
    return Fail(line, absl::StrCat("rendered text exceeds the limit of ", options_.limits.max_output_bytes,
                                   " bytes"));
  }
  return absl::OkStatus();
}

absl::Status Renderer::Bind(const Target& target, const Value& v, int line, Scope* scope) {
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

absl::Status Renderer::Assign(const Target& target, const Value& v, int line) {
  if (target.attribute.empty()) return Bind(target, v, line, scope_);
  const Value ns = Lookup(target.names[0]);
  if (!ns.is_object() || ns.object().type_name != "Namespace") {
    return Fail(line, "cannot assign attribute on non-namespace object");
  }
  ns.object().attributes.Set(Value::String(target.attribute), v);
  return absl::OkStatus();
}

absl::Status Renderer::ExecFor(const Stmt& s, std::string* out) {
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

Value Renderer::LoopObject(const std::vector<Value>& items, int64_t i,
                           const std::shared_ptr<Value>& last_changed) {
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
  a.Set(Value::String("cycle"), Value::Callable("cycle", [i](const CallArgs& args) -> absl::StatusOr<Value> {
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

absl::Status Renderer::ExecCallBlock(const Stmt& s, std::string* out) {
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

absl::StatusOr<Value> Renderer::CallValue(const Value& callee, const CallArgs& args) {
  if (callee.is_undefined()) return UndefinedError(callee);
  if (!callee.is_callable())
    return absl::InvalidArgumentError("'" + TypeName(callee) + "' object is not callable");
  return callee.function()(args);
}

// Runs a macro (or a call block's body) in a new scope under `parent`.
absl::StatusOr<Value> Renderer::CallMacro(const Stmt& macro, const CallArgs& args, Scope* parent) {
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

}  // namespace render

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
  render::Renderer renderer(parsed_->options, functions);
  return renderer.Run(parsed_->body, context);
}

}  // namespace shardlm::jinja
