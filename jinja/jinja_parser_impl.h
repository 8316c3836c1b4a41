// The Jinja parser's class, shared by its two halves: jinja_parser.cc (the
// template's structure: data, prints and statements) and
// jinja_expr_parser.cc (expressions, filters, tests and calls). Nothing
// else includes it; jinja_parser.h is the interface.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "jinja/jinja_ast.h"
#include "jinja/jinja_lexer.h"

namespace shardlm::jinja::parser {

// Deeper nesting than this is refused rather than risking the stack.
constexpr int kMaxNesting = 200;

ExprPtr MakeExpr(ExprKind kind, int line);
ExprPtr MakeUnary(ExprKind kind, int line, ExprPtr operand);
ExprPtr MakeBinary(ExprKind kind, int line, ExprPtr left, ExprPtr right);
StmtPtr MakeStmt(StmtKind kind, int line);

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  absl::StatusOr<Body> ParseAll() {
    Body body;
    SHARDLM_RETURN_IF_ERROR(Subparse({}, &body));
    return body;
  }

 private:
  // ---- token helpers ----
  const Token& Cur() const { return toks_[i_]; }
  const Token& Peek() const { return toks_[std::min(i_ + 1, toks_.size() - 1)]; }
  void Advance() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  bool IsName(std::string_view s) const { return Cur().type == TokenType::kName && Cur().text == s; }
  bool IsOp(std::string_view s) const { return Cur().type == TokenType::kOperator && Cur().text == s; }

  absl::Status Fail(const std::string& message) const { return FailAt(Cur().line, message); }
  static absl::Status FailAt(int line, const std::string& message) {
    return absl::InvalidArgumentError(absl::StrCat("template line ", line, ": ", message));
  }
  absl::Status Unexpected(const std::string& expected) const {
    return Fail(absl::StrCat("expected ", expected, ", got ", DescribeToken(Cur())));
  }
  absl::Status ExpectOp(std::string_view op) {
    if (!IsOp(op)) return Unexpected("'" + std::string(op) + "'");
    Advance();
    return absl::OkStatus();
  }
  absl::Status Expect(TokenType type, const std::string& what) {
    if (Cur().type != type) return Unexpected(what);
    Advance();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Cur().type != TokenType::kName) return Unexpected("a name");
    std::string name = Cur().text;
    Advance();
    return name;
  }

  // ---- statements ----

  // Parses template data, prints and statements until a block whose tag is
  // one of `ends` (left as the current token) or the end of the template.
  absl::Status Subparse(const std::vector<std::string>& ends, Body* body);

  // `%}` then statements up to one of `ends`; *which is the end tag found
  // (consumed).
  absl::Status ParseStatements(const std::vector<std::string>& ends, Body* body, std::string* which);
  absl::StatusOr<StmtPtr> ParseStatement();
  absl::StatusOr<Target> ParseTarget(bool with_namespace, const std::vector<std::string>& extra_end);
  absl::StatusOr<StmtPtr> ParseFor();
  absl::StatusOr<StmtPtr> ParseIf();
  absl::StatusOr<StmtPtr> ParseSet();

  // `(a, b=1)`: a macro's (or caller's) parameters.
  absl::Status ParseSignature(Stmt* s);

  // A macro body: break/continue cannot reach an enclosing loop.
  absl::Status ParseMacroBody(const char* end_tag, Stmt* s);
  absl::StatusOr<StmtPtr> ParseMacro();

  // {% call [(params)] macro(args) %}body{% endcall %}: the macro sees the
  // body as `caller()`.
  absl::StatusOr<StmtPtr> ParseCallBlock();
  absl::StatusOr<StmtPtr> ParseFilterBlock();
  absl::StatusOr<StmtPtr> ParseWith();

  // ---- expressions ----

  bool IsTupleEnd(const std::vector<std::string>& extra_end) const;

  // `a, b, c` (a tuple) or a single expression.
  absl::StatusOr<ExprPtr> ParseTuple(bool with_condexpr, const std::vector<std::string>& extra_end,
                                     bool explicit_parens);
  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr);
  absl::StatusOr<ExprPtr> ParseCondition();
  absl::StatusOr<ExprPtr> ParseOr();
  absl::StatusOr<ExprPtr> ParseAnd();
  absl::StatusOr<ExprPtr> ParseNot();
  absl::StatusOr<ExprPtr> ParseCompare();
  ExprPtr MakeArith(BinaryOp op, int line, ExprPtr left, ExprPtr right);
  absl::StatusOr<ExprPtr> ParseMath1();
  absl::StatusOr<ExprPtr> ParseConcat();
  absl::StatusOr<ExprPtr> ParseMath2();
  absl::StatusOr<ExprPtr> ParsePow();
  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter);
  absl::StatusOr<ExprPtr> ParsePrimary();
  absl::StatusOr<ExprPtr> ParseListOrDict(bool is_dict);
  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseSubscribed();
  absl::Status ParseCallArgs(Expr* e);
  absl::StatusOr<ExprPtr> ParseCall(ExprPtr node);
  absl::StatusOr<std::string> ParseDottedName();

  // `| f | g(x)` applied to node (null for filter blocks); with start_inline
  // the first filter has no leading '|'.
  absl::StatusOr<ExprPtr> ParseFilter(ExprPtr node, bool start_inline);
  absl::StatusOr<ExprPtr> ParseTest(ExprPtr node);
  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace shardlm::jinja::parser
