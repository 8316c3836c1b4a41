// Jinja template source -> tokens, with Jinja2's whitespace rules.
//
// Text between tags becomes kData tokens; each `{{ ... }}` / `{% ... %}`
// becomes begin, expression tokens, end. Comments vanish and `{% raw %}`
// bodies become data. Whitespace control happens here, as in Jinja2's lexer:
//   `{%-` / `-%}` strip all whitespace before / after the tag (`{{-`, `{#-` too);
//   trim_blocks drops the first newline after `%}` or `#}`;
//   lstrip_blocks drops spaces and tabs between a line start and `{%` / `{#`;
//   `{%+` / `+%}` opt a tag out of lstrip_blocks / trim_blocks;
//   newlines are normalized to "\n" and one trailing newline is dropped.
//
//   Tokenize("a {{- x }}\n", {}) -> [data "a", variable_begin, name x, variable_end]
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace shardlm::jinja {

struct LexerOptions {
  bool trim_blocks = false;
  bool lstrip_blocks = false;
  bool keep_trailing_newline = false;
};

enum class TokenType {
  kData,
  kVariableBegin,
  kVariableEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,    // text: the unescaped value
  kInteger,   // int_value
  kFloat,     // float_value
  kOperator,  // text: "+", "//", "(", ...
  kEnd,
};

struct Token {
  TokenType type;
  std::string text;
  int line = 1;
  int64_t int_value = 0;
  double float_value = 0;
};

// InvalidArgument naming the line for malformed source (unclosed comment or
// string, unbalanced brackets, an unexpected character, invalid UTF-8).
absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source, const LexerOptions& options);

// How a token reads in an error message: "'foo'", "end of statement block".
std::string DescribeToken(const Token& token);

}  // namespace shardlm::jinja
