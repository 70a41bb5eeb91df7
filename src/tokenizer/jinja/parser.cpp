// Jinja parser (see parser.h). The grammar functions mirror jinja2's parser.py one for one so
// that precedence and the odd corners (left-associative **, tests taking one bare argument,
// `if` conditions without conditional expressions) behave the same.
#include "tokenizer/jinja/parser.h"

#include <algorithm>
#include <initializer_list>

#include "core/error.h"

namespace eg::jinja {

namespace {

using K = Token::Kind;

constexpr int kMaxDepth = 200;  // expression / statement nesting

class Parser {
 public:
  explicit Parser(const std::vector<Token>& toks) : t_(toks) {}

  Body run() {
    Body body = subparse({});
    if (cur().kind != K::End) fail("unexpected '" + cur().text + "'");
    return body;
  }

 private:
  // ---- token helpers -----------------------------------------------------------------------
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool is_op(const char* op) const { return cur().kind == K::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().kind == K::Name && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case K::Data: return "text";
      case K::VarBegin: return "'{{'";
      case K::VarEnd: return "'}}'";
      case K::BlockBegin: return "'{%'";
      case K::BlockEnd: return "'%}'";
      case K::String: return "a string";
      case K::Int:
      case K::Float: return "a number";
      case K::End: return "the end of the template";
      default: return "'" + t.text + "'";
    }
  }
  [[noreturn]] void fail(const std::string& msg) const {
    throw Error("chat template: syntax error at line " + std::to_string(cur().line) + ": " + msg);
  }
  [[noreturn]] void unsupported(const std::string& what) const {
    throw Error("chat template: unsupported Jinja feature '" + what + "' at line " + std::to_string(cur().line));
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', found " + describe(cur()));
  }
  void expect(K kind, const char* what) {
    if (cur().kind != kind) fail(std::string("expected ") + what + ", found " + describe(cur()));
    next();
  }
  std::string expect_name() {
    if (cur().kind != K::Name) fail("expected a name, found " + describe(cur()));
    std::string n = cur().text;
    next();
    return n;
  }
  ExprPtr make(Expr::Kind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }
  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p_(p) {
      if (++p_->depth_ > kMaxDepth) p_->fail("the template nests too deeply");
    }
    ~DepthGuard() { --p_->depth_; }
    Parser* p_;
  };

  // ---- statements --------------------------------------------------------------------------

  // Parses nodes until a `{% name %}` with name in `end`; stops on that name token.
  Body subparse(std::initializer_list<const char*> end) {
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
    if (end.size() > 0) fail(std::string("missing '{% ") + *end.begin() + " %}'");
    return body;
  }

  NodePtr statement() {
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
    static const char* const kEnds[] = {"endif", "endfor", "endmacro", "endcall", "endset", "endgeneration",
                                        "elif", "else"};
    for (const char* e : kEnds)
      if (kw == e) fail("unexpected '{% " + kw + " %}'");
    unsupported(kw);
  }

  void end_tag() {  // on the end keyword
    next();
    expect(K::BlockEnd, "'%}'");
  }

  NodePtr parse_if(NodePtr n) {
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

  std::vector<std::string> assign_targets(const char* stop) {
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

  NodePtr parse_for(NodePtr n) {
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

  NodePtr parse_set(NodePtr n) {
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

  std::vector<Param> signature() {
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

  NodePtr parse_macro(NodePtr n) {
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

  NodePtr parse_call_block(NodePtr n) {
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

  // ---- expressions -------------------------------------------------------------------------

  bool tuple_end(std::initializer_list<const char*> extra) const {
    if (cur().kind == K::VarEnd || cur().kind == K::BlockEnd || is_op(")")) return true;
    for (const char* e : extra)
      if (is_name(e)) return true;
    return false;
  }

  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<const char*> extra, bool explicit_parens) {
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

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
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

  ExprPtr binary(Expr::Kind k, int line, ExprPtr a, ExprPtr b, std::string name = {}) {
    auto e = make(k, line);
    e->name = std::move(name);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const int line = cur().line;
      next();
      left = binary(Expr::Kind::Or, line, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const int line = cur().line;
      next();
      left = binary(Expr::Kind::And, line, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard g(this);
      auto e = make(Expr::Kind::Not, cur().line);
      next();
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
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

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = cur().text;
      const int line = cur().line;
      next();
      left = binary(Expr::Kind::Binary, line, std::move(left), parse_concat(), op);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const int line = cur().line;
      next();
      left = binary(Expr::Kind::Binary, line, std::move(left), parse_math2(), "~");
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = cur().text;
      const int line = cur().line;
      next();
      left = binary(Expr::Kind::Binary, line, std::move(left), parse_pow(), op);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const int line = cur().line;
      next();
      left = binary(Expr::Kind::Binary, line, std::move(left), parse_unary(true), "**");
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
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

  ExprPtr parse_primary() {
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

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("["))
        node = parse_subscript(std::move(node));
      else if (is_op("("))
        node = parse_call(std::move(node));
      else
        return node;
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
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

  ExprPtr parse_subscript(ExprPtr node) {
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

  ExprPtr parse_subscribed(ExprPtr node, int line) {
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

  void call_args(Expr& e) {
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

  ExprPtr parse_call(ExprPtr node) {
    auto e = make(Expr::Kind::Call, cur().line);
    e->args.push_back(std::move(node));
    call_args(*e);
    return e;
  }

  std::string dotted_name() {
    std::string n = expect_name();
    while (is_op(".") && peek().kind == K::Name) {
      next();
      n += "." + expect_name();
    }
    return n;
  }

  ExprPtr parse_filter(ExprPtr node) {
    next();  // '|'
    auto e = make(Expr::Kind::Filter, cur().line);
    e->name = dotted_name();
    if (!is_known_filter(e->name)) unsupported("filter " + e->name);
    e->args.push_back(std::move(node));
    if (is_op("(")) call_args(*e);
    return e;
  }

  ExprPtr parse_test(ExprPtr node) {
    next();  // 'is'
    auto e = make(Expr::Kind::Test, cur().line);
    e->negated = skip_name("not");
    e->name = dotted_name();
    if (!is_known_test(e->name)) unsupported("test " + e->name);
    e->args.push_back(std::move(node));
    if (is_op("(")) {
      call_args(*e);
    } else if ((cur().kind == K::Name || cur().kind == K::String || cur().kind == K::Int ||
                cur().kind == K::Float || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("tests cannot be chained with 'is'");
      e->args.push_back(parse_postfix(parse_primary()));
    }
    return e;
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  int macro_depth_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).run(); }

}  // namespace eg::jinja
