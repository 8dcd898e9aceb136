// Jinja parser: tokens -> syntax tree (ast.h). Supports the statements chat templates use
// (if/elif/else, for/else with inline if, set incl. block set and namespace attributes, macro,
// call, filter blocks, break/continue, raw) and jinja2's expression grammar and precedence.
// Throws JinjaError(kSyntax) with the line/column of the offending token; nesting deeper than
// kMaxNesting is refused so that evaluating the tree cannot exhaust the stack.
#pragma once

#include <string_view>

#include "chat/ast.h"
#include "chat/lexer.h"

namespace ts::chat {

inline constexpr int kMaxNesting = 100;

Body parse_template(std::string_view source, const LexerOptions& options = {});

}  // namespace ts::chat
