// Jinja lexer: template source -> tokens, with Jinja's whitespace handling already applied.
//
// Settings are transformers' (and the Hub's): trim_blocks (the first newline after a block or
// comment tag is removed), lstrip_blocks (spaces and tabs from the start of a line up to a block
// or comment tag are removed), keep_trailing_newline off (one final newline of the source is
// dropped), newlines normalised to "\n". `{%-`/`{{-`/`{#-` strip all whitespace before the tag,
// `-%}`/`-}}`/`-#}` all whitespace after it; `{%+` and `+%}` turn lstrip/trim off for that tag.
// Comments produce no tokens. `{% raw %}` is rejected as unsupported.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace eg::jinja {

struct Token {
  enum class Kind { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, End };
  Kind kind;
  std::string text;  // Data: the text; Name/Op: the spelling; String: the unescaped value
  int line = 1;
  int64_t ival = 0;
  double fval = 0;
};

/// Throws eg::Error ("chat template: syntax error at line N: ...") on malformed input.
std::vector<Token> lex(std::string_view source);

}  // namespace eg::jinja
