// Syntax tree of a parsed Jinja template (built by jinja_parser, walked by
// the renderer in jinja.cc). One Expr / Stmt struct each, tagged by kind; the
// comment on each kind says which fields it uses.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/jinja_value.h"

namespace shardlm::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  kConst,      // value
  kName,       // name
  kList,       // operands: items
  kTuple,      // operands: items
  kDict,       // operands: key0, value0, key1, value1, ...
  kGetAttr,    // operands[0].name
  kGetItem,    // operands[0][operands[1]]
  kSlice,      // operands: start, stop, step (each may be null); only inside kGetItem
  kCall,       // operands[0](args, kwargs, *star_args, **star_kwargs)
  kFilter,     // operands[0] | name(args, kwargs); operands[0] null in filter blocks
  kTest,       // operands[0] is name(args, kwargs)
  kNot,        // not operands[0]
  kNeg,        // -operands[0]
  kPos,        // +operands[0]
  kBinary,     // operands[0] op operands[1]
  kAnd,        // operands[0] and operands[1]
  kOr,         // operands[0] or operands[1]
  kCompare,    // operands[0] cmp_ops[0] operands[1] cmp_ops[1] operands[2] ...
  kCondition,  // operands[1] if operands[0] else operands[2] (may be null)
};

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat };
enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> operands;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr star_args;    // f(*star_args)
  ExprPtr star_kwargs;  // f(**star_kwargs)
  BinaryOp binary_op = BinaryOp::kAdd;
  std::vector<CompareOp> compare_ops;
};

// Left side of `set` / `for`: a name, names to unpack (`a, b`), or a
// namespace attribute (`ns.attr`).
struct Target {
  std::vector<std::string> names;
  bool unpack = false;
  std::string attribute;  // non-empty: names[0].attribute
};

enum class StmtKind {
  kOutput,       // pieces
  kIf,           // exprs: conditions; bodies: one per condition; else_body
  kFor,          // target in exprs[0] [if exprs[1]]: bodies[0] else else_body
  kSet,          // target = exprs[0]
  kSetBlock,     // target = rendered bodies[0], through filter (may be null)
  kMacro,        // name(params, defaults for the last params): bodies[0]
  kCallBlock,    // exprs[0] (a kCall) with `caller` = a macro(params, defaults): bodies[0]
  kFilterBlock,  // bodies[0] rendered, through filter
  kWith,         // params = exprs (each in the new scope): bodies[0]
  kBreak,
  kContinue,
  kScope,  // bodies[0] as is ({% generation %})
};

// Text or an expression to print.
struct OutputPiece {
  std::string text;
  ExprPtr expr;  // null for text
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::vector<OutputPiece> pieces;
  std::vector<ExprPtr> exprs;
  std::vector<Body> bodies;
  Body else_body;
  Target target;
  ExprPtr filter;  // kFilter chain whose innermost operand is null
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;
};

}  // namespace shardlm::jinja
