// Tokens -> syntax tree, following Jinja2's grammar and operator precedence:
//
//   a if c else b  <  or  <  and  <  not  <  == != < <= > >= in, not in
//   <  + -  <  ~  <  * / // %  <  **  <  unary - +  <  primary . [] () | is
//
// Like Jinja2, filter and test names are checked when the template is parsed,
// so a misspelled filter fails at load time even on a branch never taken.
//
//   SHARDLM_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source, {}));
//   SHARDLM_ASSIGN_OR_RETURN(Body body, ParseTokens(std::move(tokens)));
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "jinja/jinja_ast.h"
#include "jinja/jinja_lexer.h"

namespace shardlm::jinja {

// InvalidArgument "template line N: expected X, got Y" on a syntax error.
absl::StatusOr<Body> ParseTokens(std::vector<Token> tokens);

}  // namespace shardlm::jinja
