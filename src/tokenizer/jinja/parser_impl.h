// Internal to the Jinja parser: the recursive-descent Parser (statements in parser.cpp,
// expressions in parser_expr.cpp). The grammar functions mirror jinja2's parser.py one for one.
#pragma once
#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace eg::jinja {

inline constexpr int kMaxParseDepth = 200;  // expression / statement nesting

class Parser {
 public:
  using K = Token::Kind;
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
      case K::Data:
        return "text";
      case K::VarBegin:
        return "'{{'";
      case K::VarEnd:
        return "'}}'";
      case K::BlockBegin:
        return "'{%'";
      case K::BlockEnd:
        return "'%}'";
      case K::String:
        return "a string";
      case K::Int:
      case K::Float:
        return "a number";
      case K::End:
        return "the end of the template";
      default:
        return "'" + t.text + "'";
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
      if (++p_->depth_ > kMaxParseDepth) p_->fail("the template nests too deeply");
    }
    ~DepthGuard() { --p_->depth_; }
    Parser* p_;
  };

  // statements (parser.cpp)
  Body subparse(std::initializer_list<const char*> end);
  NodePtr statement();
  void end_tag();
  NodePtr parse_if(NodePtr n);
  std::vector<std::string> assign_targets(const char* stop);
  NodePtr parse_for(NodePtr n);
  NodePtr parse_set(NodePtr n);
  std::vector<Param> signature();
  NodePtr parse_macro(NodePtr n);
  NodePtr parse_call_block(NodePtr n);

  // expressions (parser_expr.cpp)
  ExprPtr parse_expression(bool with_condexpr);
  bool tuple_end(std::initializer_list<const char*> extra) const;
  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<const char*> extra, bool explicit_parens);
  ExprPtr parse_condexpr();
  ExprPtr binary(Expr::Kind k, int line, ExprPtr a, ExprPtr b, std::string name = {});
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed(ExprPtr node, int line);
  void call_args(Expr& e);
  ExprPtr parse_call(ExprPtr node);
  std::string dotted_name();
  ExprPtr parse_filter(ExprPtr node);
  ExprPtr parse_test(ExprPtr node);

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  int macro_depth_ = 0;
};

}  // namespace eg::jinja
