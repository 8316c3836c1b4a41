// The Jinja parser's second half: expressions by precedence (conditional,
// or, and, not, comparisons, arithmetic, concatenation, power, unary), the
// primaries, subscripts, calls, filters and tests, over Parser
// (jinja_parser_impl.h).
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "jinja/jinja_builtins.h"
#include "jinja/jinja_parser_impl.h"

namespace shardlm::jinja::parser {

bool Parser::IsTupleEnd(const std::vector<std::string>& extra_end) const {
  if (Cur().type == TokenType::kVariableEnd || Cur().type == TokenType::kBlockEnd || IsOp(")")) return true;
  return Cur().type == TokenType::kName &&
         std::find(extra_end.begin(), extra_end.end(), Cur().text) != extra_end.end();
}

// `a, b, c` (a tuple) or a single expression.
absl::StatusOr<ExprPtr> Parser::ParseTuple(bool with_condexpr, const std::vector<std::string>& extra_end,
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

absl::StatusOr<ExprPtr> Parser::ParseExpression(bool with_condexpr) {
  if (++depth_ > kMaxNesting) return Fail("expression nested too deeply");
  absl::StatusOr<ExprPtr> e = with_condexpr ? ParseCondition() : ParseOr();
  --depth_;
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseCondition() {
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

absl::StatusOr<ExprPtr> Parser::ParseOr() {
  SHARDLM_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
  while (IsName("or")) {
    const int line = Cur().line;
    Advance();
    SHARDLM_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
    left = MakeBinary(ExprKind::kOr, line, std::move(left), std::move(right));
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseAnd() {
  SHARDLM_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
  while (IsName("and")) {
    const int line = Cur().line;
    Advance();
    SHARDLM_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
    left = MakeBinary(ExprKind::kAnd, line, std::move(left), std::move(right));
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseNot() {
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

absl::StatusOr<ExprPtr> Parser::ParseCompare() {
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

ExprPtr Parser::MakeArith(BinaryOp op, int line, ExprPtr left, ExprPtr right) {
  ExprPtr e = MakeBinary(ExprKind::kBinary, line, std::move(left), std::move(right));
  e->binary_op = op;
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseMath1() {
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

absl::StatusOr<ExprPtr> Parser::ParseConcat() {
  SHARDLM_ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
  while (IsOp("~")) {
    const int line = Cur().line;
    Advance();
    SHARDLM_ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
    left = MakeArith(BinaryOp::kConcat, line, std::move(left), std::move(right));
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseMath2() {
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

absl::StatusOr<ExprPtr> Parser::ParsePow() {
  SHARDLM_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
  while (IsOp("**")) {
    const int line = Cur().line;
    Advance();
    SHARDLM_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
    left = MakeArith(BinaryOp::kPow, line, std::move(left), std::move(right));
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseUnary(bool with_filter) {
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

absl::StatusOr<ExprPtr> Parser::ParsePrimary() {
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

absl::StatusOr<ExprPtr> Parser::ParseListOrDict(bool is_dict) {
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

absl::StatusOr<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
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

absl::StatusOr<ExprPtr> Parser::ParseFilterExpr(ExprPtr node) {
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

absl::StatusOr<ExprPtr> Parser::ParseSubscript(ExprPtr node) {
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

absl::StatusOr<ExprPtr> Parser::ParseSubscribed() {
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

absl::Status Parser::ParseCallArgs(Expr* e) {
  const int line = Cur().line;
  SHARDLM_RETURN_IF_ERROR(ExpectOp("("));
  bool need_comma = false;
  while (!IsOp(")")) {
    if (need_comma) {
      SHARDLM_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
    }
    if (IsOp("*")) {
      if (e->star_args || e->star_kwargs) return FailAt(line, "invalid syntax for function call expression");
      Advance();
      SHARDLM_ASSIGN_OR_RETURN(e->star_args, ParseExpression(true));
    } else if (IsOp("**")) {
      if (e->star_kwargs) return FailAt(line, "invalid syntax for function call expression");
      Advance();
      SHARDLM_ASSIGN_OR_RETURN(e->star_kwargs, ParseExpression(true));
    } else if (Cur().type == TokenType::kName && Peek().type == TokenType::kOperator && Peek().text == "=") {
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

absl::StatusOr<ExprPtr> Parser::ParseCall(ExprPtr node) {
  ExprPtr call = MakeUnary(ExprKind::kCall, Cur().line, std::move(node));
  SHARDLM_RETURN_IF_ERROR(ParseCallArgs(call.get()));
  return call;
}

absl::StatusOr<std::string> Parser::ParseDottedName() {
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
absl::StatusOr<ExprPtr> Parser::ParseFilter(ExprPtr node, bool start_inline) {
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

absl::StatusOr<ExprPtr> Parser::ParseTest(ExprPtr node) {
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

}  // namespace shardlm::jinja::parser
