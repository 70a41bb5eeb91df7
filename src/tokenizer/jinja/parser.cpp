// Jinja parser, statements (see parser.h; the Parser class is in parser_impl.h).
#include "tokenizer/jinja/parser.h"

#include <string_view>

#include "tokenizer/jinja/parser_impl.h"

namespace eg::jinja {

Body Parser::subparse(std::initializer_list<const char*> end) {
  DepthGuard g(this);
  Body body;
  while (cur().kind != K::End) {
    if (cur().kind == K::Data) {
      auto n = std::make_unique<Node>();
      n->kind = Node::Kind::Data;
      n->line = cur().line;
      n->text = cur().text;
      body.push_back(std::move(n));
      next();
    } else if (cur().kind == K::VarBegin) {
      next();
      auto n = std::make_unique<Node>();
      n->kind = Node::Kind::Print;
      n->line = cur().line;
      n->expr = parse_tuple(true, {}, false);
      expect(K::VarEnd, "'}}'");
      body.push_back(std::move(n));
    } else if (cur().kind == K::BlockBegin) {
      next();
      if (cur().kind != K::Name) fail("expected a statement name, found " + describe(cur()));
      for (const char* e : end)
        if (cur().text == e) return body;
      body.push_back(statement());
    } else {
      fail("unexpected " + describe(cur()));
    }
  }
  for (const char* e : end)
    if (std::string_view(e).substr(0, 3) == "end") fail(std::string("missing '{% ") + e + " %}'");
  return body;
}

NodePtr Parser::statement() {
  const std::string& kw = cur().text;
  auto n = std::make_unique<Node>();
  n->line = cur().line;
  if (kw == "if") return parse_if(std::move(n));
  if (kw == "for") return parse_for(std::move(n));
  if (kw == "set") return parse_set(std::move(n));
  if (kw == "macro") return parse_macro(std::move(n));
  if (kw == "call") return parse_call_block(std::move(n));
  if (kw == "break" || kw == "continue") {
    if (loop_depth_ == 0) fail("'" + kw + "' outside a loop");
    n->kind = kw == "break" ? Node::Kind::Break : Node::Kind::Continue;
    next();
    expect(K::BlockEnd, "'%}'");
    return n;
  }
  if (kw == "generation") {
    next();
    expect(K::BlockEnd, "'%}'");
    n->kind = Node::Kind::Generation;
    n->body = subparse({"endgeneration"});
    end_tag();
    return n;
  }
  static const char* const kEnds[] = {"endif",  "endfor",        "endmacro", "endcall",
                                      "endset", "endgeneration", "elif",     "else"};
  for (const char* e : kEnds)
    if (kw == e) fail("unexpected '{% " + kw + " %}'");
  unsupported(kw);
}

void Parser::end_tag() {  // on the end keyword
  next();
  expect(K::BlockEnd, "'%}'");
}

NodePtr Parser::parse_if(NodePtr n) {
  n->kind = Node::Kind::If;
  next();
  while (true) {
    ExprPtr cond = parse_tuple(false, {}, false);
    expect(K::BlockEnd, "'%}'");
    Body body = subparse({"elif", "else", "endif"});
    n->branches.emplace_back(std::move(cond), std::move(body));
    if (is_name("elif")) {
      next();
      continue;
    }
    if (is_name("else")) {
      next();
      expect(K::BlockEnd, "'%}'");
      n->else_body = subparse({"endif"});
    }
    end_tag();
    return n;
  }
}

std::vector<std::string> Parser::assign_targets(const char* stop) {
  std::vector<std::string> names;
  const bool paren = skip_op("(");
  do {
    if (paren && is_op(")")) break;
    names.push_back(expect_name());
  } while (skip_op(","));
  if (paren) expect_op(")");
  if (stop != nullptr && !is_name(stop)) fail(std::string("expected '") + stop + "', found " + describe(cur()));
  return names;
}

NodePtr Parser::parse_for(NodePtr n) {
  n->kind = Node::Kind::For;
  next();
  n->targets = assign_targets("in");
  next();
  n->expr = parse_tuple(false, {"recursive"}, false);
  if (skip_name("if")) n->cond = parse_expression(true);
  if (is_name("recursive")) unsupported("recursive for loop");
  expect(K::BlockEnd, "'%}'");
  ++loop_depth_;
  n->body = subparse({"endfor", "else"});
  --loop_depth_;
  if (is_name("else")) {
    next();
    expect(K::BlockEnd, "'%}'");
    n->else_body = subparse({"endfor"});
  }
  end_tag();
  return n;
}

NodePtr Parser::parse_set(NodePtr n) {
  next();
  const std::string first = expect_name();
  if (skip_op(".")) {
    n->attr_target = true;
    n->targets = {first, expect_name()};
  } else {
    n->targets = {first};
    while (skip_op(",")) n->targets.push_back(expect_name());
  }
  if (skip_op("=")) {
    n->kind = Node::Kind::Set;
    n->expr = parse_tuple(true, {}, false);
    expect(K::BlockEnd, "'%}'");
    return n;
  }
  if (is_op("|")) unsupported("filtered block set");
  if (n->attr_target || n->targets.size() != 1) fail("a block set takes one name");
  expect(K::BlockEnd, "'%}'");
  n->kind = Node::Kind::SetBlock;
  n->body = subparse({"endset"});
  end_tag();
  return n;
}

std::vector<Param> Parser::signature() {
  std::vector<Param> params;
  expect_op("(");
  while (!is_op(")")) {
    if (!params.empty()) expect_op(",");
    if (is_op(")")) break;
    Param p;
    if (is_op("*")) unsupported("*args in a macro signature");
    p.name = expect_name();
    if (skip_op("=")) p.default_value = parse_expression(true);
    for (const Param& q : params)
      if (q.name == p.name) fail("duplicate parameter '" + p.name + "'");
    params.push_back(std::move(p));
  }
  next();
  return params;
}

NodePtr Parser::parse_macro(NodePtr n) {
  n->kind = Node::Kind::Macro;
  next();
  n->text = expect_name();
  n->params = signature();
  expect(K::BlockEnd, "'%}'");
  const int saved = loop_depth_;
  loop_depth_ = 0;
  ++macro_depth_;
  n->body = subparse({"endmacro"});
  --macro_depth_;
  loop_depth_ = saved;
  end_tag();
  return n;
}

NodePtr Parser::parse_call_block(NodePtr n) {
  n->kind = Node::Kind::CallBlock;
  next();
  if (is_op("(")) n->params = signature();
  n->expr = parse_expression(true);
  if (n->expr->kind != Expr::Kind::Call) fail("expected a call after 'call'");
  expect(K::BlockEnd, "'%}'");
  const int saved = loop_depth_;
  loop_depth_ = 0;
  n->body = subparse({"endcall"});
  loop_depth_ = saved;
  end_tag();
  return n;
}

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).run(); }

}  // namespace eg::jinja
