// Template: lex + parse once, render many times (see jinja.h).
#include "tokenizer/jinja/jinja.h"

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"

namespace eg::jinja {

struct Template::Parsed {
  Body body;
};

Template::Template(std::string_view source) {
  auto p = std::make_shared<Parsed>();
  p->body = parse(lex(source));
  parsed_ = std::move(p);
}

Template::~Template() = default;

std::string Template::render(const Value& variables) const {
  if (!variables.is_dict()) throw Error("chat template: the template variables must be a dict");
  Interpreter in;
  return in.render(parsed_->body, variables);
}

}  // namespace eg::jinja
