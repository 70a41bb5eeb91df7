// Jinja parser, expressions: precedence and the odd corners (left-associative **, tests taking
// one bare argument, `if` conditions without conditional expressions) as in jinja2.
#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/parser_impl.h"

namespace eg::jinja {

bool Parser::tuple_end(std::initializer_list<const char*> extra) const {
  if (cur().kind == K::VarEnd || cur().kind == K::BlockEnd || is_op(")")) return true;
  for (const char* e : extra)
    if (is_name(e)) return true;
  return false;
}

ExprPtr Parser::parse_tuple(bool with_condexpr, std::initializer_list<const char*> extra, bool explicit_parens) {
  const int line = cur().line;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_op(",");
    if (tuple_end(extra)) break;
    items.push_back(parse_expression(with_condexpr));
    if (is_op(","))
      is_tuple = true;
    else
      break;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) fail("expected an expression, found " + describe(cur()));
  }
  auto e = make(Expr::Kind::Tuple, line);
  e->args = std::move(items);
  return e;
}

ExprPtr Parser::parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

ExprPtr Parser::parse_condexpr() {
  DepthGuard g(this);
  ExprPtr e1 = parse_or();
  while (is_name("if")) {
    const int line = cur().line;
    next();
    ExprPtr test = parse_or();
    ExprPtr e3;
    if (skip_name("else")) e3 = parse_condexpr();
    auto c = make(Expr::Kind::Cond, line);
    c->args.push_back(std::move(test));
    c->args.push_back(std::move(e1));
    c->args.push_back(std::move(e3));
    e1 = std::move(c);
  }
  return e1;
}

ExprPtr Parser::binary(Expr::Kind k, int line, ExprPtr a, ExprPtr b, std::string name) {
  auto e = make(k, line);
  e->name = std::move(name);
  e->args.push_back(std::move(a));
  e->args.push_back(std::move(b));
  return e;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name("or")) {
    const int line = cur().line;
    next();
    left = binary(Expr::Kind::Or, line, std::move(left), parse_and());
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name("and")) {
    const int line = cur().line;
    next();
    left = binary(Expr::Kind::And, line, std::move(left), parse_not());
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    DepthGuard g(this);
    auto e = make(Expr::Kind::Not, cur().line);
    next();
    e->args.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const int line = cur().line;
  ExprPtr first = parse_math1();
  std::vector<std::string> ops;
  std::vector<ExprPtr> operands;
  while (true) {
    static const char* const kOps[] = {"==", "!=", "<", "<=", ">", ">="};
    std::string op;
    for (const char* o : kOps)
      if (is_op(o)) op = o;
    if (!op.empty()) {
      next();
    } else if (is_name("in")) {
      next();
      op = "in";
    } else if (is_name("not") && peek().kind == K::Name && peek().text == "in") {
      next();
      next();
      op = "notin";
    } else {
      break;
    }
    ops.push_back(op);
    operands.push_back(parse_math1());
  }
  if (ops.empty()) return first;
  auto e = make(Expr::Kind::Compare, line);
  e->args.push_back(std::move(first));
  for (auto& o : operands) e->args.push_back(std::move(o));
  e->ops = std::move(ops);
  return e;
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    const std::string op = cur().text;
    const int line = cur().line;
    next();
    left = binary(Expr::Kind::Binary, line, std::move(left), parse_concat(), op);
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  ExprPtr left = parse_math2();
  while (is_op("~")) {
    const int line = cur().line;
    next();
    left = binary(Expr::Kind::Binary, line, std::move(left), parse_math2(), "~");
  }
  return left;
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const std::string op = cur().text;
    const int line = cur().line;
    next();
    left = binary(Expr::Kind::Binary, line, std::move(left), parse_pow(), op);
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (is_op("**")) {
    const int line = cur().line;
    next();
    left = binary(Expr::Kind::Binary, line, std::move(left), parse_unary(true), "**");
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  DepthGuard g(this);
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    node = make(is_op("-") ? Expr::Kind::Neg : Expr::Kind::Pos, cur().line);
    next();
    node->args.push_back(parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  if (t.kind == K::Name) {
    const std::string& n = t.text;
    ExprPtr e = make(Expr::Kind::Const, t.line);
    if (n == "true" || n == "True") {
      e->value = Value(true);
    } else if (n == "false" || n == "False") {
      e->value = Value(false);
    } else if (n == "none" || n == "None") {
      e->value = Value::none();
    } else {
      if (macro_depth_ > 0 && (n == "varargs" || n == "kwargs")) unsupported(n + " in a macro");
      e->kind = Expr::Kind::Name;
      e->name = n;
    }
    next();
    return e;
  }
  if (t.kind == K::String) {
    ExprPtr e = make(Expr::Kind::Const, t.line);
    std::string s;
    while (cur().kind == K::String) {  // adjacent literals concatenate
      s += cur().text;
      next();
    }
    e->value = Value(std::move(s));
    return e;
  }
  if (t.kind == K::Int || t.kind == K::Float) {
    ExprPtr e = make(Expr::Kind::Const, t.line);
    e->value = t.kind == K::Int ? Value(t.ival) : Value(t.fval);
    next();
    return e;
  }
  if (skip_op("(")) {
    ExprPtr e = parse_tuple(true, {}, true);
    expect_op(")");
    return e;
  }
  if (is_op("[")) {
    ExprPtr e = make(Expr::Kind::List, t.line);
    next();
    while (!is_op("]")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("]")) break;
      e->args.push_back(parse_expression(true));
    }
    next();
    return e;
  }
  if (is_op("{")) {
    ExprPtr e = make(Expr::Kind::Dict, t.line);
    next();
    while (!is_op("}")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("}")) break;
      e->args.push_back(parse_expression(true));
      expect_op(":");
      e->args.push_back(parse_expression(true));
    }
    next();
    return e;
  }
  fail("unexpected " + describe(t));
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(".") || is_op("["))
      node = parse_subscript(std::move(node));
    else if (is_op("("))
      node = parse_call(std::move(node));
    else
      return node;
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op("|"))
      node = parse_filter(std::move(node));
    else if (is_name("is"))
      node = parse_test(std::move(node));
    else if (is_op("("))
      node = parse_call(std::move(node));
    else
      return node;
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  const int line = cur().line;
  if (skip_op(".")) {
    if (cur().kind == K::Name) {
      auto e = make(Expr::Kind::Getattr, line);
      e->name = cur().text;
      e->args.push_back(std::move(node));
      next();
      return e;
    }
    if (cur().kind != K::Int) fail("expected an attribute name after '.'");
    auto idx = make(Expr::Kind::Const, line);
    idx->value = Value(cur().ival);
    next();
    auto e = make(Expr::Kind::Getitem, line);
    e->args.push_back(std::move(node));
    e->args.push_back(std::move(idx));
    return e;
  }
  next();  // '['
  ExprPtr e = parse_subscribed(std::move(node), line);
  if (is_op(",")) unsupported("tuple subscript");
  expect_op("]");
  return e;
}

ExprPtr Parser::parse_subscribed(ExprPtr node, int line) {
  ExprPtr parts[3];
  if (!is_op(":")) {
    parts[0] = parse_expression(true);
    if (!is_op(":")) {
      auto e = make(Expr::Kind::Getitem, line);
      e->args.push_back(std::move(node));
      e->args.push_back(std::move(parts[0]));
      return e;
    }
  }
  next();  // first ':'
  if (!is_op("]") && !is_op(",") && !is_op(":")) parts[1] = parse_expression(true);
  if (skip_op(":") && !is_op("]") && !is_op(",")) parts[2] = parse_expression(true);
  auto e = make(Expr::Kind::Slice, line);
  e->args.push_back(std::move(node));
  for (auto& p : parts) e->args.push_back(std::move(p));
  return e;
}

void Parser::call_args(Expr& e) {
  expect_op("(");
  bool first = true;
  while (!is_op(")")) {
    if (!first) expect_op(",");
    first = false;
    if (is_op(")")) break;
    if (is_op("*") || is_op("**")) unsupported("*args / **kwargs in a call");
    if (cur().kind == K::Name && peek().kind == K::Op && peek().text == "=") {
      std::string key = cur().text;
      next();
      next();
      e.kwargs.emplace_back(std::move(key), parse_expression(true));
    } else {
      if (!e.kwargs.empty()) fail("a positional argument after a keyword argument");
      e.args.push_back(parse_expression(true));
    }
  }
  next();
}

ExprPtr Parser::parse_call(ExprPtr node) {
  auto e = make(Expr::Kind::Call, cur().line);
  e->args.push_back(std::move(node));
  call_args(*e);
  return e;
}

std::string Parser::dotted_name() {
  std::string n = expect_name();
  while (is_op(".") && peek().kind == K::Name) {
    next();
    n += '.';
    n += expect_name();
  }
  return n;
}

ExprPtr Parser::parse_filter(ExprPtr node) {
  next();  // '|'
  auto e = make(Expr::Kind::Filter, cur().line);
  e->name = dotted_name();
  if (!is_known_filter(e->name)) unsupported("filter " + e->name);
  e->args.push_back(std::move(node));
  if (is_op("(")) call_args(*e);
  return e;
}

ExprPtr Parser::parse_test(ExprPtr node) {
  next();  // 'is'
  auto e = make(Expr::Kind::Test, cur().line);
  e->negated = skip_name("not");
  e->name = dotted_name();
  if (!is_known_test(e->name)) unsupported("test " + e->name);
  e->args.push_back(std::move(node));
  if (is_op("(")) {
    call_args(*e);
  } else if ((cur().kind == K::Name || cur().kind == K::String || cur().kind == K::Int || cur().kind == K::Float ||
              is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail("tests cannot be chained with 'is'");
    e->args.push_back(parse_postfix(parse_primary()));
  }
  return e;
}

}  // namespace eg::jinja
