// The template renderer's class, shared by its two halves: jinja.cc (the
// statements: output, for, if, set, macros and call blocks, with Jinja2's
// scoping) and jinja_eval.cc (expressions: names, operators, filters, tests,
// calls, subscripts). Nothing else includes it; jinja.h is the interface.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "jinja/jinja.h"
#include "jinja/jinja_ast.h"
#include "jinja/jinja_value.h"
#include "nlohmann/json.hpp"

namespace shardlm::jinja::render {

enum class Flow { kNormal, kBreak, kContinue };

// A for-loop iteration, a macro call and a `with` block each get a fresh
// scope; `if` does not; `set` writes the innermost scope.
struct Scope {
  Scope* parent = nullptr;
  std::unordered_map<std::string, Value> vars;
};

class Renderer {
 public:
  Renderer(const Options& options, const Functions& functions) : options_(options), functions_(functions) {}

  absl::StatusOr<std::string> Run(const Body& body, const nlohmann::ordered_json& context);

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

  absl::Status Exec(const Body& body, std::string* out, Flow* flow);
  absl::Status ExecStmt(const Stmt& s, std::string* out, Flow* flow);

  template <typename Fn>
  absl::Status InScope(Scope* scope, Fn&& fn) {
    Scope* saved = scope_;
    scope_ = scope;
    absl::Status status = fn();
    scope_ = saved;
    return status;
  }

  absl::Status CheckOutput(int line, const std::string& out);
  absl::Status Bind(const Target& target, const Value& v, int line, Scope* scope);
  absl::Status Assign(const Target& target, const Value& v, int line);
  absl::Status ExecFor(const Stmt& s, std::string* out);
  Value LoopObject(const std::vector<Value>& items, int64_t i, const std::shared_ptr<Value>& last_changed);
  absl::Status ExecCallBlock(const Stmt& s, std::string* out);
  absl::StatusOr<Value> CallValue(const Value& callee, const CallArgs& args);

  // Runs a macro (or a call block's body) in a new scope under `parent`.
  absl::StatusOr<Value> CallMacro(const Stmt& macro, const CallArgs& args, Scope* parent);

  // ---- expressions ----

  Value Lookup(const std::string& name);
  absl::StatusOr<CallArgs> EvalArgs(const Expr& e);

  // A filter expression; in filter and set blocks the innermost operand is
  // null and `block_input` is filtered instead.
  absl::StatusOr<Value> EvalFilter(const Expr& f, const Value& block_input);
  absl::StatusOr<bool> EvalCompare(CompareOp op, const Value& a, const Value& b);
  absl::StatusOr<Value> Eval(const Expr& e);

  // [a, b] or (a, b).
  absl::StatusOr<Value> EvalSequence(const Expr& e);

  // {k: v, ...}: keys must be hashable, as in Python.
  absl::StatusOr<Value> EvalDict(const Expr& e);

  // obj[key] or obj[start:stop:step].
  absl::StatusOr<Value> EvalGetItem(const Expr& e);

  // a < b <= c ...: each operand evaluated once, stopping at the first false.
  absl::StatusOr<Value> EvalChain(const Expr& e);
  absl::StatusOr<Value> EvalInner(const Expr& e);
  const Options& options_;
  const Functions& functions_;
  Scope root_;
  Scope* scope_ = &root_;
  int64_t iterations_ = 0;
  int call_depth_ = 0;
  bool raised_ = false;
  bool annotated_ = false;
};

}  // namespace shardlm::jinja::render
