// The Jinja parser's first half: the template's structure (data, prints and
// the statements chat templates use: for, if, set, macro, call, filter,
// with), over Parser (jinja_parser_impl.h); expressions are
// jinja_expr_parser.cc's.
#include "jinja/jinja_parser.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "jinja/jinja_parser_impl.h"

namespace shardlm::jinja {
namespace parser {

ExprPtr MakeExpr(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

ExprPtr MakeUnary(ExprKind kind, int line, ExprPtr operand) {
  ExprPtr e = MakeExpr(kind, line);
  e->operands.push_back(std::move(operand));
  return e;
}

ExprPtr MakeBinary(ExprKind kind, int line, ExprPtr left, ExprPtr right) {
  ExprPtr e = MakeExpr(kind, line);
  e->operands.push_back(std::move(left));
  e->operands.push_back(std::move(right));
  return e;
}

StmtPtr MakeStmt(StmtKind kind, int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = kind;
  s->line = line;
  return s;
}

// Parses template data, prints and statements until a block whose tag is
// one of `ends` (left as the current token) or the end of the template.
absl::Status Parser::Subparse(const std::vector<std::string>& ends, Body* body) {
  if (++depth_ > kMaxNesting) return Fail("blocks nested too deeply");
  Stmt* output = nullptr;
  auto output_stmt = [&](int line) {
    if (output == nullptr) {
      body->push_back(MakeStmt(StmtKind::kOutput, line));
      output = body->back().get();
    }
    return output;
  };
  while (Cur().type != TokenType::kEnd) {
    const Token& t = Cur();
    if (t.type == TokenType::kData) {
      output_stmt(t.line)->pieces.push_back(OutputPiece{t.text, nullptr});
      Advance();
    } else if (t.type == TokenType::kVariableBegin) {
      const int line = t.line;
      Advance();
      SHARDLM_ASSIGN_OR_RETURN(ExprPtr e, ParseTuple(true, {}, false));
      SHARDLM_RETURN_IF_ERROR(Expect(TokenType::kVariableEnd, "end of print statement '}}'"));
      output_stmt(line)->pieces.push_back(OutputPiece{"", std::move(e)});
    } else if (t.type == TokenType::kBlockBegin) {
      output = nullptr;
      Advance();
      if (Cur().type == TokenType::kName && std::find(ends.begin(), ends.end(), Cur().text) != ends.end()) {
        --depth_;
        return absl::OkStatus();
      }
      SHARDLM_ASSIGN_OR_RETURN(StmtPtr stmt, ParseStatement());
      SHARDLM_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "end of statement block '%}'"));
      body->push_back(std::move(stmt));
    } else {
      return Unexpected("template data, '{{' or '{%'");
    }
  }
  if (!ends.empty()) {
    std::vector<std::string> quoted;
    for (const auto& e : ends) quoted.push_back("'" + e + "'");
    return Fail(absl::StrCat("unexpected end of template, expected ", absl::StrJoin(quoted, " or ")));
  }
  --depth_;
  return absl::OkStatus();
}

// `%}` then statements up to one of `ends`; *which is the end tag found
// (consumed).
absl::Status Parser::ParseStatements(const std::vector<std::string>& ends, Body* body, std::string* which) {
  if (IsOp(":")) Advance();
  SHARDLM_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "end of statement block '%}'"));
  SHARDLM_RETURN_IF_ERROR(Subparse(ends, body));
  if (which != nullptr) *which = Cur().text;
  Advance();
  return absl::OkStatus();
}

absl::StatusOr<StmtPtr> Parser::ParseStatement() {
  if (Cur().type != TokenType::kName) return Unexpected("a tag name");
  const std::string tag = Cur().text;
  const int line = Cur().line;
  if (tag == "for") return ParseFor();
  if (tag == "if") return ParseIf();
  if (tag == "set") return ParseSet();
  if (tag == "macro") return ParseMacro();
  if (tag == "call") return ParseCallBlock();
  if (tag == "filter") return ParseFilterBlock();
  if (tag == "with") return ParseWith();
  if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) return Fail("'" + tag + "' outside of a for loop");
    Advance();
    return MakeStmt(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue, line);
  }
  if (tag == "generation") {
    Advance();
    StmtPtr s = MakeStmt(StmtKind::kScope, line);
    s->bodies.emplace_back();
    SHARDLM_RETURN_IF_ERROR(ParseStatements({"endgeneration"}, &s->bodies[0], nullptr));
    return s;
  }
  static const char* const kUnsupported[] = {"block", "extends",    "include", "import",
                                             "from",  "autoescape", "do"};
  for (const char* name : kUnsupported) {
    if (tag == name) return Fail("the '" + tag + "' tag is not supported");
  }
  return Fail("unknown tag '" + tag + "'");
}

absl::StatusOr<Target> Parser::ParseTarget(bool with_namespace, const std::vector<std::string>& extra_end) {
  Target target;
  if (with_namespace && Cur().type == TokenType::kName && Peek().type == TokenType::kOperator &&
      Peek().text == ".") {
    target.names.push_back(Cur().text);
    Advance();
    Advance();
    SHARDLM_ASSIGN_OR_RETURN(target.attribute, ExpectName());
    return target;
  }
  const bool parens = IsOp("(");
  if (parens) Advance();
  while (true) {
    if (Cur().type != TokenType::kName) return Unexpected("a variable name");
    const std::string& name = Cur().text;
    if (name == "true" || name == "false" || name == "none" || name == "True" || name == "False" ||
        name == "None") {
      return Fail("cannot assign to '" + name + "'");
    }
    target.names.push_back(name);
    Advance();
    if (!IsOp(",")) break;
    Advance();
    target.unpack = true;
    const bool at_end = (parens && IsOp(")")) || Cur().type == TokenType::kBlockEnd ||
                        (Cur().type == TokenType::kName &&
                         std::find(extra_end.begin(), extra_end.end(), Cur().text) != extra_end.end());
    if (at_end) break;
  }
  if (parens) SHARDLM_RETURN_IF_ERROR(ExpectOp(")"));
  return target;
}

absl::StatusOr<StmtPtr> Parser::ParseFor() {
  StmtPtr s = MakeStmt(StmtKind::kFor, Cur().line);
  Advance();
  SHARDLM_ASSIGN_OR_RETURN(s->target, ParseTarget(false, {"in"}));
  if (!IsName("in")) return Unexpected("'in'");
  Advance();
  SHARDLM_ASSIGN_OR_RETURN(ExprPtr iter, ParseTuple(false, {"recursive"}, false));
  s->exprs.push_back(std::move(iter));
  if (IsName("if")) {
    Advance();
    SHARDLM_ASSIGN_OR_RETURN(ExprPtr cond, ParseExpression(true));
    s->exprs.push_back(std::move(cond));
  }
  if (IsName("recursive")) return Fail("recursive loops are not supported");
  s->bodies.emplace_back();
  std::string which;
  ++loop_depth_;
  SHARDLM_RETURN_IF_ERROR(ParseStatements({"endfor", "else"}, &s->bodies[0], &which));
  --loop_depth_;
  if (which == "else") SHARDLM_RETURN_IF_ERROR(ParseStatements({"endfor"}, &s->else_body, nullptr));
  return s;
}

absl::StatusOr<StmtPtr> Parser::ParseIf() {
  StmtPtr s = MakeStmt(StmtKind::kIf, Cur().line);
  Advance();
  while (true) {
    SHARDLM_ASSIGN_OR_RETURN(ExprPtr cond, ParseTuple(false, {}, false));
    s->exprs.push_back(std::move(cond));
    s->bodies.emplace_back();
    std::string which;
    SHARDLM_RETURN_IF_ERROR(ParseStatements({"elif", "else", "endif"}, &s->bodies.back(), &which));
    if (which == "elif") continue;
    if (which == "else") SHARDLM_RETURN_IF_ERROR(ParseStatements({"endif"}, &s->else_body, nullptr));
    return s;
  }
}

absl::StatusOr<StmtPtr> Parser::ParseSet() {
  const int line = Cur().line;
  Advance();
  SHARDLM_ASSIGN_OR_RETURN(Target target, ParseTarget(true, {}));
  if (IsOp("=")) {
    Advance();
    StmtPtr s = MakeStmt(StmtKind::kSet, line);
    s->target = std::move(target);
    SHARDLM_ASSIGN_OR_RETURN(ExprPtr value, ParseTuple(true, {}, false));
    s->exprs.push_back(std::move(value));
    return s;
  }
  StmtPtr s = MakeStmt(StmtKind::kSetBlock, line);
  s->target = std::move(target);
  if (IsOp("|")) {
    SHARDLM_ASSIGN_OR_RETURN(s->filter, ParseFilter(nullptr, false));
  }
  s->bodies.emplace_back();
  SHARDLM_RETURN_IF_ERROR(ParseStatements({"endset"}, &s->bodies[0], nullptr));
  return s;
}

// `(a, b=1)`: a macro's (or caller's) parameters.
absl::Status Parser::ParseSignature(Stmt* s) {
  SHARDLM_RETURN_IF_ERROR(ExpectOp("("));
  while (!IsOp(")")) {
    if (!s->params.empty()) SHARDLM_RETURN_IF_ERROR(ExpectOp(","));
    SHARDLM_ASSIGN_OR_RETURN(std::string param, ExpectName());
    s->params.push_back(std::move(param));
    if (IsOp("=")) {
      Advance();
      SHARDLM_ASSIGN_OR_RETURN(ExprPtr def, ParseExpression(true));
      s->defaults.push_back(std::move(def));
    } else if (!s->defaults.empty()) {
      return Fail("non-default argument follows default argument");
    }
  }
  Advance();
  return absl::OkStatus();
}

// A macro body: break/continue cannot reach an enclosing loop.
absl::Status Parser::ParseMacroBody(const char* end_tag, Stmt* s) {
  s->bodies.emplace_back();
  const int saved_loop_depth = loop_depth_;
  loop_depth_ = 0;
  SHARDLM_RETURN_IF_ERROR(ParseStatements({end_tag}, &s->bodies[0], nullptr));
  loop_depth_ = saved_loop_depth;
  return absl::OkStatus();
}

absl::StatusOr<StmtPtr> Parser::ParseMacro() {
  StmtPtr s = MakeStmt(StmtKind::kMacro, Cur().line);
  Advance();
  SHARDLM_ASSIGN_OR_RETURN(s->name, ExpectName());
  SHARDLM_RETURN_IF_ERROR(ParseSignature(s.get()));
  SHARDLM_RETURN_IF_ERROR(ParseMacroBody("endmacro", s.get()));
  return s;
}

// {% call [(params)] macro(args) %}body{% endcall %}: the macro sees the
// body as `caller()`.
absl::StatusOr<StmtPtr> Parser::ParseCallBlock() {
  StmtPtr s = MakeStmt(StmtKind::kCallBlock, Cur().line);
  s->name = "caller";
  Advance();
  if (IsOp("(")) SHARDLM_RETURN_IF_ERROR(ParseSignature(s.get()));
  SHARDLM_ASSIGN_OR_RETURN(ExprPtr call, ParseExpression(true));
  if (call->kind != ExprKind::kCall) return FailAt(s->line, "expected a call after 'call'");
  s->exprs.push_back(std::move(call));
  SHARDLM_RETURN_IF_ERROR(ParseMacroBody("endcall", s.get()));
  return s;
}

absl::StatusOr<StmtPtr> Parser::ParseFilterBlock() {
  StmtPtr s = MakeStmt(StmtKind::kFilterBlock, Cur().line);
  Advance();
  SHARDLM_ASSIGN_OR_RETURN(s->filter, ParseFilter(nullptr, true));
  s->bodies.emplace_back();
  SHARDLM_RETURN_IF_ERROR(ParseStatements({"endfilter"}, &s->bodies[0], nullptr));
  return s;
}

absl::StatusOr<StmtPtr> Parser::ParseWith() {
  StmtPtr s = MakeStmt(StmtKind::kWith, Cur().line);
  Advance();
  while (Cur().type != TokenType::kBlockEnd) {
    if (!s->params.empty()) SHARDLM_RETURN_IF_ERROR(ExpectOp(","));
    SHARDLM_ASSIGN_OR_RETURN(std::string name, ExpectName());
    SHARDLM_RETURN_IF_ERROR(ExpectOp("="));
    SHARDLM_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
    s->params.push_back(std::move(name));
    s->exprs.push_back(std::move(value));
  }
  s->bodies.emplace_back();
  SHARDLM_RETURN_IF_ERROR(ParseStatements({"endwith"}, &s->bodies[0], nullptr));
  return s;
}

}  // namespace parser

absl::StatusOr<Body> ParseTokens(std::vector<Token> tokens) {
  parser::Parser p(std::move(tokens));
  return p.ParseAll();
}

}  // namespace shardlm::jinja
