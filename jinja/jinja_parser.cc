#include "jinja/jinja_parser.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "jinja/jinja_builtins.h"

namespace shardlm::jinja {
namespace {

// Deeper nesting than this is refused rather than risking the stack.
constexpr int kMaxNesting = 200;

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
  absl::Status Subparse(const std::vector<std::string>& ends, Body* body) {
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
  absl::Status ParseStatements(const std::vector<std::string>& ends, Body* body, std::string* which) {
    if (IsOp(":")) Advance();
    SHARDLM_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "end of statement block '%}'"));
    SHARDLM_RETURN_IF_ERROR(Subparse(ends, body));
    if (which != nullptr) *which = Cur().text;
    Advance();
    return absl::OkStatus();
  }

  absl::StatusOr<StmtPtr> ParseStatement() {
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

  absl::StatusOr<Target> ParseTarget(bool with_namespace, const std::vector<std::string>& extra_end) {
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

  absl::StatusOr<StmtPtr> ParseFor() {
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

  absl::StatusOr<StmtPtr> ParseIf() {
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

  absl::StatusOr<StmtPtr> ParseSet() {
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
  absl::Status ParseSignature(Stmt* s) {
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
  absl::Status ParseMacroBody(const char* end_tag, Stmt* s) {
    s->bodies.emplace_back();
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    SHARDLM_RETURN_IF_ERROR(ParseStatements({end_tag}, &s->bodies[0], nullptr));
    loop_depth_ = saved_loop_depth;
    return absl::OkStatus();
  }

  absl::StatusOr<StmtPtr> ParseMacro() {
    StmtPtr s = MakeStmt(StmtKind::kMacro, Cur().line);
    Advance();
    SHARDLM_ASSIGN_OR_RETURN(s->name, ExpectName());
    SHARDLM_RETURN_IF_ERROR(ParseSignature(s.get()));
    SHARDLM_RETURN_IF_ERROR(ParseMacroBody("endmacro", s.get()));
    return s;
  }

  // {% call [(params)] macro(args) %}body{% endcall %}: the macro sees the
  // body as `caller()`.
  absl::StatusOr<StmtPtr> ParseCallBlock() {
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

  absl::StatusOr<StmtPtr> ParseFilterBlock() {
    StmtPtr s = MakeStmt(StmtKind::kFilterBlock, Cur().line);
    Advance();
    SHARDLM_ASSIGN_OR_RETURN(s->filter, ParseFilter(nullptr, true));
    s->bodies.emplace_back();
    SHARDLM_RETURN_IF_ERROR(ParseStatements({"endfilter"}, &s->bodies[0], nullptr));
    return s;
  }

  absl::StatusOr<StmtPtr> ParseWith() {
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

  // ---- expressions ----

  bool IsTupleEnd(const std::vector<std::string>& extra_end) const {
    if (Cur().type == TokenType::kVariableEnd || Cur().type == TokenType::kBlockEnd || IsOp(")")) return true;
    return Cur().type == TokenType::kName &&
           std::find(extra_end.begin(), extra_end.end(), Cur().text) != extra_end.end();
  }

  // `a, b, c` (a tuple) or a single expression.
  absl::StatusOr<ExprPtr> ParseTuple(bool with_condexpr, const std::vector<std::string>& extra_end,
                                     bool explicit_parens) {
    const int line = Cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) SHARDLM_RETURN_IF_ERROR(ExpectOp(","));
      if (IsTupleEnd(extra_end)) break;
      SHARDLM_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(with_condexpr));
      items.push_back(std::move(item));
      if (!IsOp(",")) break;
      is_tuple = true;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) return Unexpected("an expression");
    }
    ExprPtr t = MakeExpr(ExprKind::kTuple, line);
    t->operands = std::move(items);
    return t;
  }

  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr) {
    if (++depth_ > kMaxNesting) return Fail("expression nested too deeply");
    absl::StatusOr<ExprPtr> e = with_condexpr ? ParseCondition() : ParseOr();
    --depth_;
    return e;
  }

  absl::StatusOr<ExprPtr> ParseCondition() {
    SHARDLM_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    while (IsName("if")) {
      const int line = Cur().line;
      Advance();
      SHARDLM_ASSIGN_OR_RETURN(ExprPtr cond, ParseOr());
      ExprPtr otherwise;
      if (IsName("else")) {
        Advance();
        SHARDLM_ASSIGN_OR_RETURN(otherwise, ParseExpression(true));
      }
      ExprPtr c = MakeExpr(ExprKind::kCondition, line);
      c->operands.push_back(std::move(cond));
      c->operands.push_back(std::move(expr));
      c->operands.push_back(std::move(otherwise));
      expr = std::move(c);
    }
    return expr;
  }

  absl::StatusOr<ExprPtr> ParseOr() {
    SHARDLM_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      const int line = Cur().line;
      Advance();
      SHARDLM_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      left = MakeBinary(ExprKind::kOr, line, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    SHARDLM_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      const int line = Cur().line;
      Advance();
      SHARDLM_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      left = MakeBinary(ExprKind::kAnd, line, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      const int line = Cur().line;
      Advance();
      if (++depth_ > kMaxNesting) return Fail("expression nested too deeply");
      SHARDLM_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      --depth_;
      return MakeUnary(ExprKind::kNot, line, std::move(operand));
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    const int line = Cur().line;
    SHARDLM_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    ExprPtr cmp;
    while (true) {
      CompareOp op;
      if (IsOp("==")) {
        op = CompareOp::kEq;
      } else if (IsOp("!=")) {
        op = CompareOp::kNe;
      } else if (IsOp("<")) {
        op = CompareOp::kLt;
      } else if (IsOp("<=")) {
        op = CompareOp::kLe;
      } else if (IsOp(">")) {
        op = CompareOp::kGt;
      } else if (IsOp(">=")) {
        op = CompareOp::kGe;
      } else if (IsName("in")) {
        op = CompareOp::kIn;
      } else if (IsName("not") && Peek().type == TokenType::kName && Peek().text == "in") {
        Advance();
        op = CompareOp::kNotIn;
      } else {
        break;
      }
      Advance();
      if (!cmp) {
        cmp = MakeExpr(ExprKind::kCompare, line);
        cmp->operands.push_back(std::move(first));
      }
      SHARDLM_ASSIGN_OR_RETURN(ExprPtr right, ParseMath1());
      cmp->operands.push_back(std::move(right));
      cmp->compare_ops.push_back(op);
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr MakeArith(BinaryOp op, int line, ExprPtr left, ExprPtr right) {
    ExprPtr e = MakeBinary(ExprKind::kBinary, line, std::move(left), std::move(right));
    e->binary_op = op;
    return e;
  }

  absl::StatusOr<ExprPtr> ParseMath1() {
    SHARDLM_ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      const BinaryOp op = IsOp("+") ? BinaryOp::kAdd : BinaryOp::kSub;
      const int line = Cur().line;
      Advance();
      SHARDLM_ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
      left = MakeArith(op, line, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseConcat() {
    SHARDLM_ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
    while (IsOp("~")) {
      const int line = Cur().line;
      Advance();
      SHARDLM_ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
      left = MakeArith(BinaryOp::kConcat, line, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseMath2() {
    SHARDLM_ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const BinaryOp op = IsOp("*")    ? BinaryOp::kMul
                          : IsOp("/")  ? BinaryOp::kDiv
                          : IsOp("//") ? BinaryOp::kFloorDiv
                                       : BinaryOp::kMod;
      const int line = Cur().line;
      Advance();
      SHARDLM_ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
      left = MakeArith(op, line, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParsePow() {
    SHARDLM_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
    while (IsOp("**")) {
      const int line = Cur().line;
      Advance();
      SHARDLM_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
      left = MakeArith(BinaryOp::kPow, line, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    if (++depth_ > kMaxNesting) return Fail("expression nested too deeply");
    const int line = Cur().line;
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      const ExprKind kind = IsOp("-") ? ExprKind::kNeg : ExprKind::kPos;
      Advance();
      SHARDLM_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      node = MakeUnary(kind, line, std::move(operand));
    } else {
      SHARDLM_ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    SHARDLM_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      SHARDLM_ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    --depth_;
    return node;
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Cur();
    const int line = t.line;
    switch (t.type) {
      case TokenType::kName: {
        ExprPtr e = MakeExpr(ExprKind::kConst, line);
        if (t.text == "true" || t.text == "True") {
          e->value = Value::Bool(true);
        } else if (t.text == "false" || t.text == "False") {
          e->value = Value::Bool(false);
        } else if (t.text == "none" || t.text == "None") {
          e->value = Value::None();
        } else {
          e->kind = ExprKind::kName;
          e->name = t.text;
        }
        Advance();
        return e;
      }
      case TokenType::kString: {
        std::string text;
        while (Cur().type == TokenType::kString) {
          text += Cur().text;
          Advance();
        }
        ExprPtr e = MakeExpr(ExprKind::kConst, line);
        e->value = Value::String(std::move(text));
        return e;
      }
      case TokenType::kInteger:
      case TokenType::kFloat: {
        ExprPtr e = MakeExpr(ExprKind::kConst, line);
        e->value = t.type == TokenType::kInteger ? Value::Int(t.int_value) : Value::Float(t.float_value);
        Advance();
        return e;
      }
      case TokenType::kOperator:
        if (t.text == "(") {
          Advance();
          SHARDLM_ASSIGN_OR_RETURN(ExprPtr e, ParseTuple(true, {}, true));
          SHARDLM_RETURN_IF_ERROR(ExpectOp(")"));
          return e;
        }
        if (t.text == "[" || t.text == "{") return ParseListOrDict(t.text == "{");
        break;
      default:
        break;
    }
    return Fail("unexpected " + DescribeToken(t));
  }

  absl::StatusOr<ExprPtr> ParseListOrDict(bool is_dict) {
    ExprPtr e = MakeExpr(is_dict ? ExprKind::kDict : ExprKind::kList, Cur().line);
    const char* close = is_dict ? "}" : "]";
    Advance();
    while (!IsOp(close)) {
      if (!e->operands.empty()) {
        SHARDLM_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp(close)) break;
      }
      SHARDLM_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
      e->operands.push_back(std::move(item));
      if (is_dict) {
        SHARDLM_RETURN_IF_ERROR(ExpectOp(":"));
        SHARDLM_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        e->operands.push_back(std::move(value));
      }
    }
    Advance();
    return e;
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".") || IsOp("[")) {
        SHARDLM_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
      } else if (IsOp("(")) {
        SHARDLM_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        SHARDLM_ASSIGN_OR_RETURN(node, ParseFilter(std::move(node), false));
      } else if (IsName("is")) {
        SHARDLM_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
      } else if (IsOp("(")) {
        SHARDLM_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node) {
    const int line = Cur().line;
    if (IsOp(".")) {
      Advance();
      if (Cur().type == TokenType::kName) {
        ExprPtr e = MakeUnary(ExprKind::kGetAttr, line, std::move(node));
        e->name = Cur().text;
        Advance();
        return e;
      }
      if (Cur().type != TokenType::kInteger) return Unexpected("a name or number after '.'");
      ExprPtr index = MakeExpr(ExprKind::kConst, line);
      index->value = Value::Int(Cur().int_value);
      Advance();
      return MakeBinary(ExprKind::kGetItem, line, std::move(node), std::move(index));
    }
    Advance();  // '['
    std::vector<ExprPtr> args;
    while (!IsOp("]")) {
      if (!args.empty()) SHARDLM_RETURN_IF_ERROR(ExpectOp(","));
      SHARDLM_ASSIGN_OR_RETURN(ExprPtr arg, ParseSubscribed());
      args.push_back(std::move(arg));
    }
    Advance();
    if (args.empty()) return FailAt(line, "expected a subscript expression inside '[]'");
    ExprPtr key;
    if (args.size() == 1) {
      key = std::move(args[0]);
    } else {
      key = MakeExpr(ExprKind::kTuple, line);
      key->operands = std::move(args);
    }
    return MakeBinary(ExprKind::kGetItem, line, std::move(node), std::move(key));
  }

  absl::StatusOr<ExprPtr> ParseSubscribed() {
    const int line = Cur().line;
    ExprPtr slice = MakeExpr(ExprKind::kSlice, line);
    if (IsOp(":")) {
      Advance();
      slice->operands.push_back(nullptr);
    } else {
      SHARDLM_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(true));
      if (!IsOp(":")) return e;
      Advance();
      slice->operands.push_back(std::move(e));
    }
    auto at_slice_end = [this] { return IsOp("]") || IsOp(","); };
    if (IsOp(":") || at_slice_end()) {
      slice->operands.push_back(nullptr);
    } else {
      SHARDLM_ASSIGN_OR_RETURN(ExprPtr stop, ParseExpression(true));
      slice->operands.push_back(std::move(stop));
    }
    if (IsOp(":")) {
      Advance();
      if (at_slice_end()) {
        slice->operands.push_back(nullptr);
      } else {
        SHARDLM_ASSIGN_OR_RETURN(ExprPtr step, ParseExpression(true));
        slice->operands.push_back(std::move(step));
      }
    } else {
      slice->operands.push_back(nullptr);
    }
    return slice;
  }

  absl::Status ParseCallArgs(Expr* e) {
    const int line = Cur().line;
    SHARDLM_RETURN_IF_ERROR(ExpectOp("("));
    bool need_comma = false;
    while (!IsOp(")")) {
      if (need_comma) {
        SHARDLM_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp(")")) break;
      }
      if (IsOp("*")) {
        if (e->star_args || e->star_kwargs)
          return FailAt(line, "invalid syntax for function call expression");
        Advance();
        SHARDLM_ASSIGN_OR_RETURN(e->star_args, ParseExpression(true));
      } else if (IsOp("**")) {
        if (e->star_kwargs) return FailAt(line, "invalid syntax for function call expression");
        Advance();
        SHARDLM_ASSIGN_OR_RETURN(e->star_kwargs, ParseExpression(true));
      } else if (Cur().type == TokenType::kName && Peek().type == TokenType::kOperator &&
                 Peek().text == "=") {
        if (e->star_kwargs) return FailAt(line, "invalid syntax for function call expression");
        std::string key = Cur().text;
        Advance();
        Advance();
        SHARDLM_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        e->kwargs.emplace_back(std::move(key), std::move(value));
      } else {
        if (!e->kwargs.empty() || e->star_args || e->star_kwargs) {
          return FailAt(line, "positional argument follows keyword argument");
        }
        SHARDLM_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        e->args.push_back(std::move(value));
      }
      need_comma = true;
    }
    Advance();
    return absl::OkStatus();
  }

  absl::StatusOr<ExprPtr> ParseCall(ExprPtr node) {
    ExprPtr call = MakeUnary(ExprKind::kCall, Cur().line, std::move(node));
    SHARDLM_RETURN_IF_ERROR(ParseCallArgs(call.get()));
    return call;
  }

  absl::StatusOr<std::string> ParseDottedName() {
    SHARDLM_ASSIGN_OR_RETURN(std::string name, ExpectName());
    while (IsOp(".")) {
      Advance();
      SHARDLM_ASSIGN_OR_RETURN(std::string part, ExpectName());
      name += "." + part;
    }
    return name;
  }

  // `| f | g(x)` applied to node (null for filter blocks); with start_inline
  // the first filter has no leading '|'.
  absl::StatusOr<ExprPtr> ParseFilter(ExprPtr node, bool start_inline) {
    while (IsOp("|") || start_inline) {
      if (!start_inline) Advance();
      start_inline = false;
      const int line = Cur().line;
      SHARDLM_ASSIGN_OR_RETURN(std::string name, ParseDottedName());
      if (!IsKnownFilter(name)) return FailAt(line, "no filter named '" + name + "'");
      ExprPtr f = MakeUnary(ExprKind::kFilter, line, std::move(node));
      f->name = std::move(name);
      if (IsOp("(")) SHARDLM_RETURN_IF_ERROR(ParseCallArgs(f.get()));
      node = std::move(f);
    }
    return node;
  }

  absl::StatusOr<ExprPtr> ParseTest(ExprPtr node) {
    const int line = Cur().line;
    Advance();  // 'is'
    bool negated = false;
    if (IsName("not")) {
      negated = true;
      Advance();
    }
    SHARDLM_ASSIGN_OR_RETURN(std::string name, ParseDottedName());
    if (!IsKnownTest(name)) return FailAt(line, "no test named '" + name + "'");
    ExprPtr test = MakeUnary(ExprKind::kTest, line, std::move(node));
    test->name = std::move(name);
    const TokenType type = Cur().type;
    const bool starts_arg = type == TokenType::kName || type == TokenType::kString ||
                            type == TokenType::kInteger || type == TokenType::kFloat || IsOp("(") ||
                            IsOp("[") || IsOp("{");
    if (IsOp("(")) {
      SHARDLM_RETURN_IF_ERROR(ParseCallArgs(test.get()));
    } else if (starts_arg && !IsName("else") && !IsName("or") && !IsName("and")) {
      if (IsName("is")) return Fail("you cannot chain multiple tests with 'is'");
      SHARDLM_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
      SHARDLM_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
      test->args.push_back(std::move(arg));
    }
    return negated ? MakeUnary(ExprKind::kNot, line, std::move(test)) : std::move(test);
  }

  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

absl::StatusOr<Body> ParseTokens(std::vector<Token> tokens) {
  Parser parser(std::move(tokens));
  return parser.ParseAll();
}

}  // namespace shardlm::jinja
