// Jinja lexer: splits template source into text and tag tokens, applying whitespace control the
// way jinja2 does under transformers' settings (trim_blocks and lstrip_blocks on,
// keep_trailing_newline off) plus `{%- -%}`, `{{- -}}`, `{#- -#}` and `+` markers.
// Throws JinjaError(kSyntax) with line/column on unterminated tags, strings or comments.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ts::chat {

enum class TokenType {
  kText,        // literal template text (after whitespace control)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,      // text holds the unescaped value
  kInt,
  kFloat,
  kOperator,
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string text;
  int line = 1;
  int column = 1;
  int64_t int_value = 0;
  double float_value = 0;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options = {});

}  // namespace ts::chat
