// Internal to the Jinja interpreter: walks the syntax tree and renders it.
//
// Scoping follows jinja2: the template's top level is one scope (its `set`s are visible after
// an `if`), each for-loop iteration, macro call, call block and block set runs in a new child
// scope (so a `set` inside a loop is gone after it and only namespace attributes carry state
// out), macros see the scope they were defined in as it is when they are called.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/value.h"

namespace eg::jinja {

struct Scope {
  std::shared_ptr<Scope> parent;
  DictData vars;
  const Value* find(std::string_view name) const;
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter {
 public:
  /// Renders `body` with `variables` (a dict) on top of the global functions.
  std::string render(const Body& body, const Value& variables);

  /// Calls a function value (macros, builtins, bound methods).
  Value call(const Value& fn, CallArgs& args);

 private:
  enum class Flow { Normal, Break, Continue };
  Flow exec(const Body& body, const ScopePtr& scope, std::string& out);
  Flow exec_node(const Node& n, const ScopePtr& scope, std::string& out);
  void exec_for(const Node& n, const ScopePtr& scope, std::string& out);
  void exec_set(const Node& n, const ScopePtr& scope);
  Value make_macro(const Node& n, const ScopePtr& scope, const std::string& name);
  Value call_macro(const Node& n, const std::weak_ptr<Scope>& defined_in, const std::string& name, CallArgs& args);
  Value eval(const Expr& e, const ScopePtr& scope);
  Value eval_inner(const Expr& e, const ScopePtr& scope);
  CallArgs eval_args(const Expr& e, size_t first, const ScopePtr& scope);

  /// Counts one loop iteration or macro call against the render's budget (interpreter.cpp).
  void step();

  int call_depth_ = 0;
  int64_t steps_ = 0;
};

}  // namespace eg::jinja
