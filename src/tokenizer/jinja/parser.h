// Jinja parser: tokens -> syntax tree, following jinja2's grammar and operator precedence
// (lowest first): `x if c else y`, or, and, not, comparisons (== != < <= > >= in, not in;
// chained as in Python), + -, ~, * / // %, **, unary - +, then postfix (.attr, [index], [a:b:c],
// calls) with filters `|` and tests `is [not]` binding tighter than every binary operator.
//
// Statements: if/elif/else, for (tuple targets, `if` filter, else; loop.* in the body; break
// and continue as with jinja2.ext.loopcontrols, which transformers enables), set (names, tuples,
// namespace attributes, and block set), macro (with defaults), call blocks, and transformers'
// generation block. Unknown statements, filters and tests fail at parse time with
// "chat template: unsupported Jinja feature '...' at line N".
#pragma once
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace eg::jinja {

/// Throws eg::Error on a syntax error or an unsupported construct.
Body parse(const std::vector<Token>& tokens);

/// The filter and test names the interpreter implements (checked by the parser).
bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);

}  // namespace eg::jinja
